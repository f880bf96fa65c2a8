#!/usr/bin/env python3
"""Reference token ids for xtrain's tokenizer tests, made by the reference implementations.

  python3 tests/vectors/make_tokenizer_vectors.py --out tests/vectors --ranks data/tokenizers \\
      --text ../shared/data [--hf-json NAME=FILE ...]

--ranks DIR   tiktoken rank files (scripts/setup.sh --tokenizers): <name>.tiktoken for r50k_base,
              p50k_base, cl100k_base, o200k_base, llama3; those missing are skipped with a note
--text DIR    the shared data folder; the sample is its first lines plus the hard cases below
--hf-json     a Hugging Face tokenizer.json under a name (e.g. gpt2=../shared/data/gpt2/tokenizer.json)

Writes DIR/tiktoken_<name>.json and DIR/hf_<name>.json: {"made_by", "source", "source_sha256",
"cases": [{"text", "ids"}]}. tiktoken encodes with allowed_special="all" (what xtrain does);
`tokenizers` with add_special_tokens=True. Needs tiktoken and tokenizers (Python); works offline:
the rank files are read with tiktoken.load.load_tiktoken_bpe, never downloaded.
"""
import argparse
import hashlib
import json
import os
import sys

# Encodings as tiktoken_ext/openai_public.py and Meta's llama3 tokenizer.py define them. The patterns
# are copied here for llama3, which tiktoken does not define; for the OpenAI encodings the vectors are made
# with tiktoken's own definitions (tiktoken_definition), so they check xtrain's copies (src/data/tiktoken.cpp).
R50K = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CL100K = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
O200K = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def llama3_specials(base):
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]
    names += [f"<|reserved_special_token_{i}|>" for i in range(5, 256 - 5)]
    return {t: base + i for i, t in enumerate(names)}


ENCODINGS = {
    "r50k_base": ("r50k_base.tiktoken", R50K, {"<|endoftext|>": 50256}),
    "p50k_base": ("p50k_base.tiktoken", R50K, {"<|endoftext|>": 50256}),
    "cl100k_base": ("cl100k_base.tiktoken", CL100K, {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258,
                                                     "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
                                                     "<|endofprompt|>": 100276}),
    "o200k_base": ("o200k_base.tiktoken", O200K, {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
    "llama3": ("llama3.tiktoken", LLAMA3, None),
}

HARD_CASES = [
    "", " ", "  ", "\n", "\n\n\n", " \n \n", "\t\t x", "a  b   c    d", "trailing spaces   ", "line\r\nbreak\r\n",
    "1 12 123 1234 12345 3.14159 1,000,000 2024-06-01", "٣٤٥ ٦٧٨٩",
    "I'm you're he's they've we'll I'd can't", "I'M YOU'RE HE'S THEY'VE WE'LL I'D CAN'T", "I'm YoU'Re hE'S",
    "don’t won’t", "'s 's 'S'", "Ünïcödé naïve café", "e\u0301 a\u0300 n\u0303 (combining marks)",
    "ǅungla ǈ ǋ Title-case digraphs", "ﬁ ﬂ ligatures ſ long s", "Straße ΣΊΣΥΦΟΣ", "中文分词测试，句号。", "日本語のテキスト",
    "한국어 텍스트", "Привет, мир!", "مرحبا بالعالم", "🙂🙃 👨‍👩‍👧‍👦 🏳️‍🌈 emoji", "a/b/c http://x.y/z?q=1",
    "<|endoftext|>", "before<|endoftext|>after", "<|endoftext|><|endoftext|>", "<|endofprompt|> x <|fim_prefix|>",
    "<|begin_of_text|>Hi<|eot_id|>", "<|reserved_special_token_7|>", "<|endoftext", "x" * 300, "  " * 150 + "y",
    "def f(x):\n    return x**2  # comment\n", "{\"json\": [1, 2, 3]}", "$$\\frac{a}{b}$$",
    # Qwen2's tokenizer.json: NFC normalizer, its chat specials, single digits
    "A\u030a \u212b \u1100\u1161\u11a8 (NFC composes)", "<|im_start|>user\nhi<|im_end|>\n", "x<|im_start|>y",
    "2024 1234567",
]


def tiktoken_definition(name, path):
    """tiktoken's own constructor (tiktoken_ext/openai_public.py) for name, its rank file read from path
    instead of downloaded; None where tiktoken has no such constructor (llama3)."""
    try:
        import tiktoken_ext.openai_public as public
    except ImportError:
        return None
    make = getattr(public, name, None)
    if make is None:
        return None
    from tiktoken.load import load_tiktoken_bpe
    real = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = lambda *args, **kwargs: load_tiktoken_bpe(path)
    try:
        return make()
    finally:
        public.load_tiktoken_bpe = real


def sample_texts(text_dir, lines_per_file=40):
    out = list(HARD_CASES)
    for name in ("tinyshakespeare.txt", "tinystories-valid.txt"):
        path = os.path.join(text_dir, name)
        if not os.path.exists(path):
            sys.exit(f"{path}: missing (give --text the shared data folder)")
        with open(path, encoding="utf-8") as f:
            lines = [next(f) for _ in range(lines_per_file)]
        out.append("".join(lines))       # one multi-line block
        out.extend(l for l in lines[:10])  # and single lines with their newline
    return out


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def write(out_dir, name, made_by, source, cases):
    path = os.path.join(out_dir, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"made_by": made_by, "source": os.path.basename(source), "source_sha256": sha256(source),
                   "cases": cases}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {path} ({len(cases)} cases)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ranks", help="folder of <name>.tiktoken rank files")
    ap.add_argument("--text", required=True, help="shared data folder (tinyshakespeare.txt, tinystories-valid.txt)")
    ap.add_argument("--hf-json", action="append", default=[], metavar="NAME=FILE")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    texts = sample_texts(a.text)
    if a.ranks:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
        for name, (file, pat, specials) in ENCODINGS.items():
            path = os.path.join(a.ranks, file)
            if not os.path.exists(path):
                print(f"skipping {name}: {path} missing")
                continue
            ranks = load_tiktoken_bpe(path)
            if specials is None:
                specials = llama3_specials(len(ranks))
            own = tiktoken_definition(name, path)
            if own is not None:  # tiktoken's own pattern and special tokens are the reference where it has them
                same = own["pat_str"] == pat and own["special_tokens"] == specials
                print(f"{name}: tiktoken_ext.openai_public's definition ({'equal to' if same else 'other text than'}"
                      " the copy here)")
                enc = tiktoken.Encoding(**own)
            else:
                enc = tiktoken.Encoding(name=name, pat_str=pat, mergeable_ranks=ranks, special_tokens=specials)
            cases = [{"text": t, "ids": enc.encode(t, allowed_special="all")} for t in texts]
            write(a.out, f"tiktoken_{name}.json", f"tiktoken {tiktoken.__version__}", path, cases)
    for spec in a.hf_json:
        from tokenizers import Tokenizer, __version__ as tv
        name, _, path = spec.partition("=")
        tok = Tokenizer.from_file(path)
        cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=True).ids} for t in texts]
        write(a.out, f"hf_{name}.json", f"tokenizers {tv}", path, cases)


if __name__ == "__main__":
    main()
