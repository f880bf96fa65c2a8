#!/usr/bin/env python3
"""make_eval_items.py OUTDIR: the test data of test_eval.sh, made here (never the real HellaSwag file).

memorize.txt: five sentences, repeated, for a model to learn by heart; hs.jsonl: one item per sentence in
HellaSwag's format (its context the sentence's first words, the right ending its rest, the wrong ones other
sentences' ends), one of them as ctx_a/ctx_b and one with its label as text, as the dataset's copies have
them; generic.jsonl: the same kind of items in the generic form (context, choices, answer); bad.jsonl: a
good item, then one whose endings[1] is a number.
"""
import json
import os
import sys

SENTENCES = [
    ("The red fox jumps over the", "lazy dog near the old mill."),
    ("A small boat drifts slowly down", "the quiet river at dawn."),
    ("My grandmother bakes bread", "with honey every Sunday morning."),
    ("Seven bright stars shine above", "the frozen northern lake."),
    ("The brave knight rode his horse", "across the burning bridge."),
]


def main(out):
    with open(os.path.join(out, "memorize.txt"), "w") as f:
        for _ in range(80):
            for a, b in SENTENCES:
                f.write(f"{a} {b}\n")
    n = len(SENTENCES)
    hs, generic = [], []
    for i, (ctx, right) in enumerate(SENTENCES):
        wrong = [SENTENCES[(i + k) % n][1] for k in (1, 2, 3)]
        label = i % 4
        endings = wrong[:label] + [right] + wrong[label:]
        item = {"ind": i, "activity_label": "test", "ctx": ctx, "endings": endings, "label": label, "split": "val"}
        if i == 2:  # the dataset's two context parts, joined by the reader
            words = ctx.split(" ")
            item = {"ind": i, "ctx_a": " ".join(words[:2]), "ctx_b": " ".join(words[2:]), "endings": endings,
                    "label": label}
        if i == 3:
            item["label"] = str(label)  # the Hugging Face copy's text labels
        hs.append(item)
        generic.append({"context": ctx, "choices": list(reversed(endings)), "answer": len(endings) - 1 - label})
    for name, items in (("hs.jsonl", hs), ("generic.jsonl", generic)):
        with open(os.path.join(out, name), "w") as f:
            f.write("".join(json.dumps(x) + "\n" for x in items))
    with open(os.path.join(out, "bad.jsonl"), "w") as f:
        f.write(json.dumps(hs[0]) + "\n")
        f.write(json.dumps({"ctx": "x", "endings": ["a", 3], "label": 0}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
