#!/usr/bin/env python3
"""Checks xtrain's model directories against Hugging Face transformers (GPU machine: torch,
transformers 5.x, safetensors; no network needed). docs/serving.md shows the full loop. The class
comes from config.json's model_type: gpt2 -> GPT2LMHeadModel, llama -> LlamaForCausalLM.

  load         <class>.from_pretrained(DIR): no missing / unexpected / mismatched keys and no
               warning, the head tied to the token embedding exactly when config.json says so
               (exit 1 otherwise).
  logits       transformers' fp32 logits for the prompts of --ids against xtrain's (--xtrain-logits,
               one file per prompt); prints the max abs difference per prompt; exit 1 above --tol
               (default 1e-4).
  generate     transformers' greedy generation: one line of new token ids per prompt, and tok/s.
  mc           scores a multiple-choice file (HellaSwag's JSON lines or context/choices/answer) with
               transformers in fp32 as xtrain_eval does (context tokens, then those of " " + choice, cut
               from the left to the context + 1; the sum of the choice tokens' log-probabilities) and
               compares with `xtrain_eval --mc FILE --json F` (--xtrain-json F): every choice's sum within
               --tol (default 1e-4), the same token counts, and acc, acc_norm, acc_token_mean identical
               (exit 1 otherwise). The tokenizer is the export's own (AutoTokenizer).
  tokenizer    AutoTokenizer.from_pretrained(DIR) loads the directory's tokenizer with no other package,
               and its ids (encode with the tokenizer's own special tokens, as xtrain encodes) equal
               xtrain's for every text of --texts (a JSON array; --xtrain-ids: what `xtrain_tokenize
               --print-ids-of TEXTS` prints, one line per text); exit 1 on any difference.
  text-generate  greedy text through transformers' tokenizer and model (the prompt encoded by
               AutoTokenizer, generate, the new ids decoded) against `xtrain_generate --model DIR
               --prompt P --temperature 0` with no tokenizer option (its text past the prompt), for each
               prompt of --prompts (a JSON array); exit 1 on any difference.
  make-random  a randomly initialised GPT2LMHeadModel(GPT2Config(...)) or, with --arch llama,
               LlamaForCausalLM(LlamaConfig(...)) (grouped-query with --n-kv-head, untied with
               --untied) saved by save_pretrained (safetensors), with the GPT-2 tokenizer files, for
               `xtrain_mpi --init-from` and `xtrain_generate --model`.

File formats (shared with xtrain):
  --ids FILE            one prompt per line, whitespace-separated token ids (what
                        `xtrain_tokenize --print-ids TEXT` prints).
  --xtrain-logits F...  one file per line of --ids, in order: what `xtrain_generate --dump-logits F`
                        writes: float32 little-endian, row-major (T, V), no header; row t = logits of
                        the token after prompt tokens 0..t; V = config.json's vocab_size.
"""
import argparse
import json
import logging
import shutil
import sys
import time
import warnings
from pathlib import Path


def read_ids(path):
    prompts = [[int(t) for t in line.split()] for line in Path(path).read_text().splitlines() if line.strip()]
    if not prompts:
        sys.exit(f"{path}: no prompts")
    return prompts


def model_class(model_dir):
    """transformers' class for config.json's model_type (the families xtrain exports)."""
    import transformers

    model_type = json.loads((Path(model_dir) / "config.json").read_text()).get("model_type")
    classes = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}
    if model_type not in classes:
        sys.exit(f"{model_dir}/config.json: model_type {model_type!r} is none of {sorted(classes)}")
    return getattr(transformers, classes[model_type])


def load(model_dir, device, strict=True):
    """from_pretrained with every warning captured; strict: exit 1 on any key problem or warning."""
    import torch
    import transformers

    cls = model_class(model_dir)

    records = []

    class Catch(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    transformers.logging.set_verbosity_warning()
    handler = Catch(level=logging.WARNING)
    transformers.logging.get_logger().addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model, info = cls.from_pretrained(model_dir, dtype=torch.float32, output_loading_info=True,
                                              attn_implementation="eager")
    finally:
        transformers.logging.get_logger().removeHandler(handler)
    problems = [f"{k}: {v}" for k, v in info.items() if v]
    problems += [f"warning: {m}" for m in records] + [f"warning: {w.message}" for w in caught]
    if strict and problems:
        sys.exit(f"{model_dir}: from_pretrained reported:\n  " + "\n  ".join(map(str, problems)))
    # tied: the head is the token embedding's storage; untied (a Llama's own lm_head): another tensor
    tied = model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    if tied != bool(model.config.tie_word_embeddings):
        sys.exit(f"{model_dir}: tie_word_embeddings {model.config.tie_word_embeddings} but the loaded head is "
                 f"{'' if tied else 'not '}the token embedding")
    return model.to(device).eval()


def cmd_load(a):
    model = load(a.model, a.device)
    n = sum(p.numel() for p in model.parameters())
    print(f"{a.model}: {type(model).__name__} loaded, no missing/unexpected/mismatched keys, no warnings, "
          f"tie_word_embeddings {model.config.tie_word_embeddings}, {n} parameters")


def cmd_logits(a):
    import numpy as np
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 (no TF32 matmuls)
    torch.backends.cudnn.allow_tf32 = False
    model = load(a.model, a.device)
    prompts = read_ids(a.ids)
    if len(prompts) != len(a.xtrain_logits):
        sys.exit(f"{len(prompts)} prompts in {a.ids}, {len(a.xtrain_logits)} --xtrain-logits files")
    worst = 0.0
    for k, (ids, path) in enumerate(zip(prompts, a.xtrain_logits)):
        with torch.no_grad():
            ref = model(torch.tensor([ids], device=a.device)).logits[0].float().cpu()
        raw = np.fromfile(path, dtype="<f4")
        if raw.size != ref.numel():
            sys.exit(f"{path}: {raw.size} floats, expected {tuple(ref.shape)} (prompt {k}: T x vocab_size)")
        got = torch.from_numpy(raw.reshape(tuple(ref.shape)))
        diff = (got - ref).abs().max().item()
        worst = max(worst, diff)
        print(f"prompt {k}: {len(ids)} tokens, max |logit diff| {diff:.3e}")
    print(f"max |logit diff| over all prompts: {worst:.3e} (tolerance {a.tol:g})")
    sys.exit(0 if worst <= a.tol else 1)


def cmd_generate(a):
    import torch

    model = load(a.model, a.device)
    prompts = read_ids(a.ids)
    eos = None if a.ignore_eos else model.config.eos_token_id
    total, secs = 0, 0.0
    for ids in prompts:
        x = torch.tensor([ids] * a.batch, device=a.device)
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=a.max_new_tokens, do_sample=False,
                                 eos_token_id=eos, pad_token_id=model.config.eos_token_id)
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        secs += time.perf_counter() - t0
        new = out[:, len(ids):]
        total += new.numel()
        print(" ".join(str(t) for t in new[0].tolist()))
    print(f"transformers greedy: batch {a.batch}, {total} new tokens in {secs:.3f} s = {total / secs:.1f} tok/s",
          file=sys.stderr)


def read_mc(path):
    """(line, context, choices, label) of each item, by xtrain's rules (include/xtrain/score/multiple_choice.h)."""
    items = []
    for no, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip(" \t\r"):
            continue
        r = json.loads(line)
        if "endings" in r:
            ctx = r["ctx"] if "ctx" in r else r["ctx_a"] + (" " + r["ctx_b"] if r["ctx_b"] else "")
            items.append((no, ctx, r["endings"], int(r["label"])))
        else:
            items.append((no, r["context"], r["choices"], int(r["answer"])))
    return items


def accuracies(items, sums, tokens):
    """acc, acc_norm (by UTF-8 bytes), acc_token_mean; ties to the first choice (numpy's argmax)."""
    right = [0, 0, 0]
    for (_, _, choices, label), s, n in zip(items, sums, tokens):
        nbytes = [len(c.encode("utf-8")) for c in choices]
        for m, score in enumerate((s, [x / b for x, b in zip(s, nbytes)], [x / k for x, k in zip(s, n)])):
            right[m] += score.index(max(score)) == label  # the first of equal maxima
    return [r / len(items) for r in right]


def cmd_mc(a):
    import torch
    from transformers import AutoTokenizer

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
    torch.backends.cudnn.allow_tf32 = False
    model = load(a.model, a.device)
    # the export's own tokenizer.json, as a user of the export loads it; no special tokens added (xtrain's
    # contexts and choices are plain text)
    tok = AutoTokenizer.from_pretrained(a.model)
    encode = lambda text: tok.encode(text, add_special_tokens=False)
    cfg = model.config
    max_len = getattr(cfg, "n_positions", None) or cfg.max_position_embeddings
    items = read_mc(a.file)
    ours = json.loads(Path(a.xtrain_json).read_text())
    mine = [m for m in ours["mc"] if Path(m["file"]).name == Path(a.file).name]
    if len(mine) != 1:
        sys.exit(f"{a.xtrain_json}: no (or several) --mc results for {Path(a.file).name}")
    ours = mine[0]
    if len(ours["per_item"]) != len(items):
        sys.exit(f"{a.xtrain_json}: {len(ours['per_item'])} items, {a.file} has {len(items)}")
    sums, counts, worst, t0 = [], [], 0.0, time.perf_counter()
    for (no, ctx, choices, _), x in zip(items, ours["per_item"]):
        if x["line"] != no:
            sys.exit(f"item at line {no}: xtrain's is at line {x['line']}")
        c_ids = encode(ctx)
        rows, ns = [], []
        for ch in choices:
            e = encode(" " + ch)
            rows.append((c_ids + e)[-(max_len + 1):])
            ns.append(len(e))
        T = max(len(r) for r in rows) - 1
        inp = torch.zeros((len(rows), T), dtype=torch.long)
        mask = torch.zeros((len(rows), T), dtype=torch.long)
        for i, r in enumerate(rows):
            inp[i, :len(r) - 1] = torch.tensor(r[:-1])
            mask[i, :len(r) - 1] = 1  # right padding: causal attention never reads it
        with torch.no_grad():
            logits = model(inp.to(a.device), attention_mask=mask.to(a.device)).logits.float()
        logp = torch.log_softmax(logits, dim=-1).double().cpu()
        s = []
        for i, (r, n) in enumerate(zip(rows, ns)):
            L = len(r) - 1
            tgt = torch.tensor(r[1:])[L - n:]
            s.append(logp[i, L - n:L].gather(1, tgt[:, None]).sum().item())
        if ns != x["tokens"]:
            sys.exit(f"{a.file}:{no}: choice token counts {ns} here, {x['tokens']} in xtrain's")
        worst = max(worst, max(abs(p - q) for p, q in zip(s, x["logprob"])))
        sums.append(s)
        counts.append(ns)
    theirs = accuracies(items, sums, counts)
    names = ("acc", "acc_norm", "acc_token_mean")
    same = all(theirs[k] == ours[n] for k, n in enumerate(names))
    print(f"{a.file}: {len(items)} items, {sum(map(len, sums))} choices in {time.perf_counter() - t0:.1f} s; "
          f"max |log-prob sum diff| {worst:.3e} (tolerance {a.tol:g})")
    for k, n in enumerate(names):
        print(f"  {n}: transformers {theirs[k]:.6f}, xtrain {ours[n]:.6f}" + ("" if theirs[k] == ours[n] else "  DIFFERENT"))
    sys.exit(0 if worst <= a.tol and same else 1)
def control_tokens(model_dir):
    """The special added tokens of a SentencePiece (Unigram) export's tokenizer.json: transformers matches
    their text in the input (an added special token, as every Hugging Face conversion of a SentencePiece
    model does), libsentencepiece's Encode does not (docs/serving.md); [] for any other tokenizer."""
    tj = json.loads((Path(model_dir) / "tokenizer.json").read_text())
    if tj["model"].get("type") != "Unigram":
        return []
    return [t["content"] for t in tj["added_tokens"] if t.get("special")]


def cmd_tokenizer(a):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.model)
    texts = json.loads(Path(a.texts).read_text())
    lines = Path(a.xtrain_ids).read_text().split("\n")
    if len(lines) < len(texts):
        sys.exit(f"{a.xtrain_ids}: {len(lines)} lines for {len(texts)} texts")
    controls = control_tokens(a.model)
    bad = known = n_ids = 0
    for text, line in zip(texts, lines):
        want = [int(t) for t in line.split()]
        got = tok(text)["input_ids"]
        n_ids += len(want)
        if got == want:
            continue
        if any(c in text for c in controls):  # the one documented difference, reported, not counted
            known += 1
            print(f"  control-token text {text!r}: transformers {got[:12]}, xtrain (libsentencepiece) {want[:12]}")
            continue
        bad += 1
        if bad <= 5:
            print(f"  MISMATCH on {text!r}:\n    transformers {got}\n    xtrain       {want}")
    print(f"{a.model}: AutoTokenizer -> {type(tok).__name__} (bos {tok.bos_token!r}, eos {tok.eos_token!r}); "
          f"{len(texts)} texts, {n_ids} ids: {len(texts) - bad - known} equal to xtrain's, {bad} differ"
          + (f", {known} with control-token text (documented difference)" if known else ""))
    sys.exit(1 if bad else 0)


def cmd_text_generate(a):
    import subprocess

    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.model)
    model = load(a.model, a.device)
    prompts = json.loads(Path(a.prompts).read_text())
    bad = 0
    for prompt in prompts:
        cmd = [a.xtrain_generate, "--model", a.model, "--device", a.xtrain_device, "--dtype", "fp32", "--prompt", prompt,
               "--temperature", "0", "--ignore-eos", "--max-new-tokens", str(a.max_new_tokens)]
        r = subprocess.run(cmd, capture_output=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
        out = r.stdout.decode("utf-8", errors="replace")
        if not out.startswith(prompt) or not out.endswith("\n"):
            sys.exit(f"xtrain_generate's text does not start with the prompt {prompt!r}: {out[:80]!r}")
        x_text = out[len(prompt):-1]
        ids = tok(prompt, return_tensors="pt").input_ids.to(a.device)
        with torch.no_grad():
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.max_new_tokens, do_sample=False,
                                 eos_token_id=None, pad_token_id=model.config.eos_token_id or 0)
        prompt_ids, new = ids[0].tolist(), gen[0, ids.shape[1]:].tolist()
        before = tok.decode(prompt_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        after = tok.decode(prompt_ids + new, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        h_text = after[len(before):] if after.startswith(before) else tok.decode(new, skip_special_tokens=False)
        same = h_text == x_text
        bad += not same
        print(f"  {'same' if same else 'DIFFERENT'}: {prompt!r} -> {x_text[:60]!r}"
              + ("" if same else f"\n    transformers {h_text[:200]!r}\n    xtrain       {x_text[:200]!r}"))
    print(f"{a.model}: greedy text of {len(prompts)} prompts x {a.max_new_tokens} tokens through AutoTokenizer + "
          f"{type(model).__name__}: {len(prompts) - bad} equal to xtrain_generate's, {bad} differ")
    sys.exit(1 if bad else 0)


def cmd_make_random(a):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(a.seed)
    if a.arch == "llama":
        # LlamaConfig's own defaults for the rest (rms_norm_eps 1e-6, rope_theta 10000, silu, no biases),
        # so the import reads what transformers writes, not what xtrain's exporter writes
        cfg = LlamaConfig(vocab_size=a.vocab_size, hidden_size=a.n_embd, intermediate_size=a.n_inner or 4 * a.n_embd,
                          num_hidden_layers=a.n_layer, num_attention_heads=a.n_head,
                          num_key_value_heads=a.n_kv_head or a.n_head, max_position_embeddings=a.n_positions,
                          tie_word_embeddings=not a.untied)
        model = LlamaForCausalLM(cfg)
        # transformers' init draws N(0, 0.02) matrices and unit norms: logits near zero; wider weights and
        # norm gains away from 1 make the comparison see every tensor (and a mix-up of q/k/v or gate/up)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(1.0 + 0.2 * torch.randn_like(p) if name.endswith("norm.weight") else 0.08 * torch.randn_like(p))
        what = (f"LlamaForCausalLM(hidden_size={cfg.hidden_size}, layers={cfg.num_hidden_layers}, "
                f"heads={cfg.num_attention_heads}, kv_heads={cfg.num_key_value_heads}, tied={cfg.tie_word_embeddings})")
    else:
        cfg = GPT2Config(vocab_size=a.vocab_size, n_positions=a.n_positions, n_embd=a.n_embd, n_layer=a.n_layer,
                         n_head=a.n_head, n_inner=a.n_inner)
        model = GPT2LMHeadModel(cfg)
        what = f"GPT2LMHeadModel({cfg.n_embd=}, {cfg.n_layer=}, {cfg.n_head=}, {cfg.n_positions=})"
    model.save_pretrained(a.out, safe_serialization=True)
    for src, dst in ((a.encoder_json, "vocab.json"), (a.vocab_bpe, "merges.txt")):
        shutil.copyfile(src, Path(a.out) / dst)
    print(f"{a.out}: random {what} saved")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    dev = argparse.ArgumentParser(add_help=False)
    dev.add_argument("--device", default="cuda", help="torch device (default cuda)")
    dev.add_argument("--model", required=True, help="model directory (xtrain_export output or save_pretrained)")
    s = sub.add_parser("load", parents=[dev], help="from_pretrained with no missing/unexpected keys, no warnings")
    s.set_defaults(fn=cmd_load)
    s = sub.add_parser("logits", parents=[dev], help="fp32 logits against xtrain's")
    s.add_argument("--ids", required=True, help="prompts: one line of token ids each")
    s.add_argument("--xtrain-logits", required=True, nargs="+", help="raw fp32 (T, V) logits, one file per prompt")
    s.add_argument("--tol", type=float, default=1e-4, help="max abs difference allowed (default 1e-4)")
    s.set_defaults(fn=cmd_logits)
    s = sub.add_parser("generate", parents=[dev], help="greedy generation: new token ids per prompt, tok/s")
    s.add_argument("--ids", required=True, help="prompts: one line of token ids each")
    s.add_argument("--max-new-tokens", type=int, default=64)
    s.add_argument("--batch", type=int, default=1, help="each prompt repeated this many times (speed runs)")
    s.add_argument("--ignore-eos", action="store_true", help="do not stop at <|endoftext|>")
    s.set_defaults(fn=cmd_generate)
    s = sub.add_parser("mc", parents=[dev], help="multiple-choice scores against xtrain_eval --json")
    s.add_argument("--file", required=True, help="the --mc file xtrain_eval scored")
    s.add_argument("--xtrain-json", required=True, help="what xtrain_eval --json wrote for it")
    s.add_argument("--tol", type=float, default=1e-4, help="max abs difference of a choice's sum (default 1e-4)")
    s.set_defaults(fn=cmd_mc)
    s = sub.add_parser("tokenizer", help="AutoTokenizer loads DIR; its ids equal xtrain's on --texts")
    s.add_argument("--model", required=True, help="model directory (xtrain_export output)")
    s.add_argument("--texts", required=True, help="a JSON array of texts")
    s.add_argument("--xtrain-ids", required=True, help="xtrain_tokenize --print-ids-of TEXTS output, one line per text")
    s.set_defaults(fn=cmd_tokenizer)
    s = sub.add_parser("text-generate", parents=[dev], help="greedy text: AutoTokenizer + model against xtrain_generate")
    s.add_argument("--prompts", required=True, help="a JSON array of prompt texts")
    s.add_argument("--xtrain-generate", required=True, help="path of xtrain_generate")
    s.add_argument("--xtrain-device", default="cuda", help="xtrain_generate --device (default cuda)")
    s.add_argument("--max-new-tokens", type=int, default=32)
    s.set_defaults(fn=cmd_text_generate)
    s = sub.add_parser("make-random", help="random GPT2LMHeadModel or LlamaForCausalLM saved with save_pretrained")
    s.add_argument("--out", required=True)
    s.add_argument("--arch", choices=("gpt2", "llama"), default="gpt2")
    s.add_argument("--n-kv-head", type=int, default=None, help="llama: key/value heads (default --n-head)")
    s.add_argument("--untied", action="store_true", help="llama: an lm_head of its own (tie_word_embeddings false)")
    s.add_argument("--n-embd", type=int, default=64)
    s.add_argument("--n-layer", type=int, default=2)
    s.add_argument("--n-head", type=int, default=4)
    s.add_argument("--n-inner", type=int, default=None, help="MLP width (default 4 x n-embd; llama: intermediate_size)")
    s.add_argument("--n-positions", type=int, default=128)
    s.add_argument("--vocab-size", type=int, default=50257)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--encoder-json", default="data/gpt2/encoder.json", help="copied to vocab.json")
    s.add_argument("--vocab-bpe", default="data/gpt2/vocab.bpe", help="copied to merges.txt")
    s.set_defaults(fn=cmd_make_random)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
