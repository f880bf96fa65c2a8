#!/usr/bin/env python3
"""Tokenizing speed of xtrain against tiktoken, one core each, on the same text (bench/results/tokenize_cpu_2026-12.md).

  python3 bench/tokenize_speed.py --bin build --ranks data/tokenizers \\
      --text ../shared/data/tinyshakespeare.txt --text ../shared/data/tinystories-train-1000.txt --mb 50

Each --text is repeated to about --mb MB in a temporary file. For each encoding (gpt2, r50k_base,
cl100k_base, o200k_base, llama3; those whose rank file is missing are skipped) it times xtrain's
single-threaded encode (`xtrain_tokenize --input FILE`: its `seconds=` figure, the encode alone, not
the file read or the cache write) and, where the Python package is importable, tiktoken's
`encode_ordinary` of the same text (single-threaded; tiktoken's `gpt2` is r50k_base's ranks and
pattern, so gpt2 is compared with it). xtrain also matches special tokens (allowed_special="all"),
which encode_ordinary skips; on texts without them the ids are the same, and the token counts of
both are printed as a check. One JSON line per (text, encoding): MB/s of each (MB = 1e6 bytes) and
xtrain / tiktoken. --repeat N keeps the best of N runs of each.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "vectors"))
from make_tokenizer_vectors import ENCODINGS, llama3_specials, tiktoken_definition  # noqa: E402  one home

NAMES = ["gpt2", "r50k_base", "cl100k_base", "o200k_base", "llama3"]


def xtrain_seconds(tool, name, ranks, text_path, out_path):
    args = [tool, "--input", text_path, "--output", out_path]
    if name != "gpt2":
        args += ["--tokenizer", name, "--tokenizer-ranks", os.path.join(ranks, ENCODINGS[name][0])]
    line = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    m = re.search(r"tokens=(\d+) bytes=(\d+) seconds=([0-9.]+)", line)
    return float(m.group(3)), int(m.group(1))


def tiktoken_encoding(name, ranks):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    key = "r50k_base" if name == "gpt2" else name
    file, pat, specials = ENCODINGS[key]
    path = os.path.join(ranks, file)
    own = tiktoken_definition(key, path)
    if own is not None:
        return tiktoken.Encoding(**own)
    mergeable = load_tiktoken_bpe(path)
    return tiktoken.Encoding(name=key, pat_str=pat, mergeable_ranks=mergeable,
                             special_tokens=specials if specials is not None else llama3_specials(len(mergeable)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="folder of xtrain_tokenize")
    ap.add_argument("--ranks", required=True, help="folder of <name>.tiktoken rank files (scripts/setup.sh --tokenizers)")
    ap.add_argument("--text", action="append", required=True)
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--encodings", default=",".join(NAMES))
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    try:
        import tiktoken  # noqa: F401
        have_tiktoken = True
    except ImportError:
        have_tiktoken = False
        print("# tiktoken not importable: xtrain's side only", file=sys.stderr)
    tool = os.path.join(a.bin, "xtrain_tokenize")
    with tempfile.TemporaryDirectory() as tmp:
        for src in a.text:
            base = open(src, "rb").read()
            data = base * max(1, int(a.mb * 1e6 / len(base) + 0.5))
            path = os.path.join(tmp, "text.txt")
            open(path, "wb").write(data)
            text = data.decode("utf-8")
            for name in a.encodings.split(","):
                if name != "gpt2" and not os.path.exists(os.path.join(a.ranks, ENCODINGS[name][0])):
                    print(f"# {name}: no rank file in {a.ranks}, skipped", file=sys.stderr)
                    continue
                rec = {"text": os.path.basename(src), "mb": round(len(data) / 1e6, 1), "encoding": name}
                runs = [xtrain_seconds(tool, name, a.ranks, path, os.path.join(tmp, "c.tokcache")) for _ in range(a.repeat)]
                xs, rec["xtrain_tokens"] = min(r[0] for r in runs), runs[0][1]
                rec["xtrain_mb_s"] = round(len(data) / 1e6 / xs, 2)
                if have_tiktoken:
                    enc = tiktoken_encoding(name, a.ranks)
                    best = None
                    for _ in range(a.repeat):
                        t0 = time.perf_counter()
                        ids = enc.encode_ordinary(text)
                        dt = time.perf_counter() - t0
                        best = dt if best is None else min(best, dt)
                    rec["tiktoken_tokens"] = len(ids)
                    rec["tiktoken_mb_s"] = round(len(data) / 1e6 / best, 2)
                    rec["ratio_xtrain_over_tiktoken"] = round(rec["xtrain_mb_s"] / rec["tiktoken_mb_s"], 2)
                print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
