#!/usr/bin/env bash
# bench/eval_gpu.sh — multiple-choice scores checked against transformers, on a machine with a GPU, torch
# and transformers: makes a HellaSwag-format file from the held-out tail of data/brown.txt (sentences cut in
# two: the context and its own end against three other sentences' ends; a few contexts of several
# sentences, longer than the model's context, so the left cut is exercised), trains a GPT-2 and a Llama
# (grouped-query, its own head) on the rest with --eval-mc on that file, and for each:
#   - the trainer's last --eval-mc record equals `xtrain_eval --ckpt` on its checkpoint (cuda, the run's
#     dtype), bit for bit;
#   - `xtrain_eval --model EXPORT --device cuda --dtype fp32 --json` against transformers in fp32
#     (bench/hf_check.py mc): every choice's log-probability sum within 1e-4, every accuracy identical;
#   - the same export scored on the CPU (fp32): the accuracies printed beside the GPU's.
# Exits non-zero at the first failed check. docs/usage.md ("Evaluating") says what is scored.
#
# Usage: bench/eval_gpu.sh   (env: BIN=build-gpu DATA=data OUT=<tmp> STEPS=300 ITEMS=400 PY=python3
#                             ONLY="gpt2 llama": the models to check;
#                             SKIP_HF=1 DEVICE=cpu BIN=build: a dry run without the GPU and transformers)
set -euo pipefail
source "$(dirname "$0")/common.sh" && xt_help "$@"  # -h/--help: the header comment above

DATA=${DATA:-data}
OUT=${OUT:-$(mktemp -d)}
STEPS=${STEPS:-300}
ITEMS=${ITEMS:-400}
PY=${PY:-python3}
SKIP_HF=${SKIP_HF:-0}
DEVICE=${DEVICE:-cuda}
BIN=${BIN:-$([[ $DEVICE == cpu ]] && echo build || echo build-gpu)}
xt_require_bin "$BIN"
mkdir -p "$OUT"
tok=(--encoder-json "$DATA/gpt2/encoder.json" --vocab-bpe "$DATA/gpt2/vocab.bpe")
say() { printf 'eval: %s\n' "$*"; }
fail() { printf 'eval: FAILED: %s\n' "$*" >&2; exit 1; }

# the data: the first 90% of brown.txt to train on, items from the rest
"$PY" - "$DATA/brown.txt" "$OUT" "$ITEMS" <<'PY'
import json, sys
text = open(sys.argv[1], encoding="utf-8").read()
cut = int(len(text) * 0.9)
open(sys.argv[2] + "/train.txt", "w", encoding="utf-8").write(text[:cut])
sents = [s.strip() for s in text[cut:].replace("\n", " ").split(". ")]
sents = [s for s in sents if 12 <= len(s.split()) <= 40]
n = int(sys.argv[3])
items = []
for i in range(n):
    w = sents[i].split()
    k = len(w) * 3 // 5
    ctx, right = " ".join(w[:k]), " ".join(w[k:]) + "."
    if i % 40 == 39:  # a context of several sentences: longer than the model's 128 positions
        ctx = ". ".join(sents[i + 1:i + 9]) + ". " + ctx
    wrong = [" ".join(sents[(i + 7 * j) % len(sents)].split()[len(sents[(i + 7 * j) % len(sents)].split()) * 3 // 5:]) + "."
             for j in (1, 2, 3)]
    label = i % 4
    endings = wrong[:label] + [right] + wrong[label:]
    items.append({"ind": i, "ctx_a": ctx, "ctx_b": "", "ctx": ctx, "endings": endings, "label": label, "split": "val"})
with open(sys.argv[2] + "/items.jsonl", "w", encoding="utf-8") as f:
    f.write("".join(json.dumps(x) + "\n" for x in items))
print(f"eval: {len(items)} items from the held-out tail of {sys.argv[1]}")
PY

check() {  # check NAME TRAIN_OPTIONS...
  local name=$1 m="$OUT/$1"
  shift
  [[ " ${ONLY:-gpt2 llama} " == *" $name "* ]] || return 0
  say "$name: training $* for $STEPS steps on $DEVICE, --eval-mc at the end"
  mpirun --allow-run-as-root -np 1 "$BIN/xtrain_mpi" --device "$DEVICE" --data "$OUT/train.txt" "${tok[@]}" "$@" \
    --steps "$STEPS" --val-every "$STEPS" --log-every 100 --eval-mc items="$OUT/items.jsonl" --metrics "$m.jsonl" \
    --ckpt "$m.ckpt" >"$m.train.log" 2>&1 || { tail -5 "$m.train.log"; fail "$name: training"; }
  grep "items acc" "$m.train.log"
  "$BIN/xtrain_eval" --ckpt "$m.ckpt" --device "$DEVICE" "${tok[@]}" --mc "$OUT/items.jsonl" --json "$m.ckpt.json"
  "$PY" - "$m.jsonl" "$m.ckpt.json" <<'PY' || fail "$name: xtrain_eval --ckpt differs from the trainer's figures"
import json, sys
rec = [json.loads(l) for l in open(sys.argv[1]) if '"eval"' in l][-1]
(got,) = json.load(open(sys.argv[2]))["mc"]
for k in ("items", "acc", "acc_norm", "acc_token_mean", "right_logprob"):
    assert got[k] == rec[k], (k, got[k], rec[k])
print("eval: trainer == xtrain_eval --ckpt, bit for bit: right_logprob %r" % rec["right_logprob"])
PY
  "$BIN/xtrain_export" "$m.ckpt" "${tok[@]}" --out "$m" >/dev/null
  "$BIN/xtrain_eval" --model "$m" --device "$DEVICE" --dtype fp32 --mc "$OUT/items.jsonl" --json "$m.fp32.json"
  [[ $DEVICE == cpu ]] || "$BIN/xtrain_eval" --model "$m" --device cpu --mc "$OUT/items.jsonl" --json "$m.cpu.json"
  if [[ "$SKIP_HF" == 1 ]]; then say "$name: transformers check skipped (SKIP_HF=1)"; return; fi
  say "$name: transformers fp32 vs xtrain_eval $DEVICE fp32"
  "$PY" bench/hf_check.py mc --model "$m" --file "$OUT/items.jsonl" --xtrain-json "$m.fp32.json" --tol 1e-4 \
    || fail "$name: transformers"
}

check gpt2
check llama --arch llama --kv-heads 2 --tie-embeddings false
say "all checks passed ($OUT)"
