#!/usr/bin/env python3
"""SentencePiece test models and their reference ids, made by SentencePiece itself.

  python3 tests/vectors/make_spm_vectors.py --out tests/vectors --text ../shared/data

Trains two small models on tinyshakespeare.txt with Debian's spm_train (package sentencepiece,
0.1.97; --num_threads=1 and a fixed seed: the output is byte-for-byte the same on every run; only
--model_prefix is stored in the file, so it is fixed too):

  spm_bpe.model      BPE, vocab 512, spm_train's defaults (nmt_nfkc normalizer, extra whitespace
                     removed, dummy prefix): newlines become spaces, as in most spm_train models
  spm_unigram.model  unigram, vocab 512, identity normalizer, whitespace kept, byte fallback: newlines
                     and unknown characters are kept (as bytes), as in Llama 2's tokenizer.model

and writes spm_<name>.json ({"made_by", "source", "source_sha256", "cases": [{"text", "ids"}]}) for
the texts of make_tokenizer_vectors.py (its HARD_CASES and sample lines: one home). The ids are the
library's Encode of each whole text (python3-sentencepiece, the same library as libsentencepiece);
every text without a newline is also checked against `spm_encode --output_format=id`, which encodes
line by line. Needs the Debian packages sentencepiece and python3-sentencepiece (/usr/bin/python3).
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_vectors import sample_texts, write  # noqa: E402

MODELS = {
    "bpe": ["--model_type=bpe"],
    "unigram": ["--model_type=unigram", "--normalization_rule_name=identity", "--remove_extra_whitespaces=false",
                "--byte_fallback=true"],
}
COMMON = ["--vocab_size=512", "--num_threads=1", "--random_seed=1", "--minloglevel=2"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--text", required=True, help="shared data folder (tinyshakespeare.txt, tinystories-valid.txt)")
    a = ap.parse_args()
    import sentencepiece as spm
    corpus = os.path.abspath(os.path.join(a.text, "tinyshakespeare.txt"))
    texts = sample_texts(a.text)
    for name, args in MODELS.items():
        prefix = f"spm_{name}"
        subprocess.run(["spm_train", f"--input={corpus}", f"--model_prefix={prefix}"] + args + COMMON, cwd=a.out,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.remove(os.path.join(a.out, prefix + ".vocab"))
        model = os.path.join(a.out, prefix + ".model")
        sp = spm.SentencePieceProcessor(model_file=model)
        cases = [{"text": t, "ids": sp.encode(t)} for t in texts]
        for c in cases:
            if "\n" in c["text"] or c["text"] == "":
                continue
            got = subprocess.run(["spm_encode", f"--model={model}", "--output_format=id"], input=c["text"] + "\n",
                                 capture_output=True, text=True, check=True).stdout.split()
            if [int(i) for i in got] != c["ids"]:
                sys.exit(f"{model}: spm_encode and the library differ on {c['text']!r}")
        write(a.out, f"spm_{name}.json", f"sentencepiece {spm.__version__}", model, cases)


if __name__ == "__main__":
    main()
