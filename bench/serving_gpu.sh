#!/usr/bin/env bash
# bench/serving_gpu.sh — the serving loop on a machine with a GPU, torch and transformers:
# train a small model, export it twice (byte-identical, md5 against the registry), load it with
# transformers' GPT2LMHeadModel, compare fp32 logits (4 prompts), compare greedy generation token by
# token between transformers, xtrain CUDA and xtrain CPU (5 prompts x 64 tokens), import a randomly
# initialised transformers GPT-2 into xtrain and compare logits, then time greedy generation against
# transformers' generate at batch 1 and 16 on a GPT-2 124M-shaped model (xtrain with and without the
# decoding step's CUDA graph, which must give the same tokens). Exits non-zero at the first
# failed check. docs/serving.md records a run.
#
# Usage: bench/serving_gpu.sh   (env: BIN=build-gpu DATA=data OUT=<tmp> STEPS=300 PY=python3
#                                 NEW=64 SPEED_NEW=128; SKIP_HF=1 DEVICE=cpu: a dry run, BIN=build)
set -euo pipefail
source "$(dirname "$0")/common.sh" && xt_help "$@"  # -h/--help: the header comment above

DATA=${DATA:-data}
OUT=${OUT:-$(mktemp -d)}
STEPS=${STEPS:-300}
PY=${PY:-python3}
NEW=${NEW:-64}
SPEED_NEW=${SPEED_NEW:-128}
SKIP_HF=${SKIP_HF:-0}
DEVICE=${DEVICE:-cuda}  # cpu: a dry run of the xtrain parts on a machine without a GPU
BIN=${BIN:-$([[ $DEVICE == cpu ]] && echo build || echo build-gpu)}
mkdir -p "$OUT"
tok=(--encoder-json "$DATA/gpt2/encoder.json" --vocab-bpe "$DATA/gpt2/vocab.bpe")
hf() { "$PY" bench/hf_check.py "$@"; }
say() { printf 'serving: %s\n' "$*"; }
fail() { printf 'serving: FAILED: %s\n' "$*" >&2; exit 1; }
gen() { "$BIN/xtrain_generate" "${tok[@]}" "$@"; }

# 1. a trained model and its export, twice; the registry check
say "training the default model for $STEPS steps on $DEVICE"
mpirun --allow-run-as-root -np 1 "$BIN/xtrain_mpi" --device "$DEVICE" --data "$DATA/brown.txt" "${tok[@]}" \
  --steps "$STEPS" --val-every 0 --log-every 100 --ckpt "$OUT/run.ckpt" >"$OUT/train.log" 2>&1 ||
  { tail -5 "$OUT/train.log"; fail "training"; }
tail -2 "$OUT/train.log"
"$BIN/xtrain_export" "$OUT/run.ckpt" "${tok[@]}" --out "$OUT/model" --registry "$OUT/registry.json" --name run --replace
"$BIN/xtrain_export" "$OUT/run.ckpt" "${tok[@]}" --out "$OUT/model2"
cmp "$OUT/model/model.safetensors" "$OUT/model2/model.safetensors" || fail "two exports differ"
"$BIN/xtrain_export" --verify run --registry "$OUT/registry.json" "$OUT/run.ckpt" "${tok[@]}"
md5sum "$OUT/model/model.safetensors"

# 2. prompts as token ids, one line each
prompts=("The jury said" "It was a cold morning in" "In the beginning" "The president of the United States"
         "She opened the door and")
: >"$OUT/ids.txt"
for p in "${prompts[@]}"; do "$BIN/xtrain_tokenize" "${tok[@]}" --print-ids "$p" >>"$OUT/ids.txt"; done

# dump_logits MODEL_DIR PREFIX: xtrain $DEVICE fp32 logits of the first 4 prompts -> PREFIX{0..3}.f32
dump_logits() {
  local k files=()
  for k in 0 1 2 3; do
    gen --model "$1" --device "$DEVICE" --dtype fp32 --prompt-ids "$(sed -n "$((k + 1))p" "$OUT/ids.txt")" \
      --max-new-tokens 0 --dump-logits "$2$k.f32" >/dev/null
    files+=("$2$k.f32")
  done
  head -4 "$OUT/ids.txt" >"$OUT/ids4.txt"
  [[ "$SKIP_HF" == 1 ]] || hf logits --model "$1" --ids "$OUT/ids4.txt" --xtrain-logits "${files[@]}" --tol 1e-4
}

[[ "$SKIP_HF" == 1 ]] || hf load --model "$OUT/model"
if [[ "$SKIP_HF" == 1 ]]; then say "logits: xtrain $DEVICE fp32, trained model (transformers check skipped: SKIP_HF=1)"
else say "logits: transformers vs xtrain $DEVICE fp32, trained model"; fi
dump_logits "$OUT/model" "$OUT/logits_trained_"

# 3. greedy generation, token-identical across transformers, xtrain cuda and xtrain cpu
say "greedy generation, ${#prompts[@]} prompts x $NEW tokens"
: >"$OUT/greedy.cuda" && : >"$OUT/greedy.cpu"
while read -r ids; do
  gen --model "$OUT/model" --device "$DEVICE" --dtype fp32 --prompt-ids "$ids" --temperature 0 --ignore-eos \
    --max-new-tokens "$NEW" --print-ids >>"$OUT/greedy.cuda" 2>/dev/null
  gen --model "$OUT/model" --device cpu --prompt-ids "$ids" --temperature 0 --ignore-eos \
    --max-new-tokens "$NEW" --print-ids >>"$OUT/greedy.cpu" 2>/dev/null
done <"$OUT/ids.txt"
cmp "$OUT/greedy.cuda" "$OUT/greedy.cpu" || fail "xtrain $DEVICE and cpu greedy tokens differ"
if [[ "$SKIP_HF" != 1 ]]; then
  hf generate --model "$OUT/model" --ids "$OUT/ids.txt" --max-new-tokens "$NEW" --ignore-eos >"$OUT/greedy.hf"
  cmp "$OUT/greedy.cuda" "$OUT/greedy.hf" || fail "transformers and xtrain greedy tokens differ"
fi
hf_greedy=" and transformers"
[[ "$SKIP_HF" == 1 ]] && hf_greedy=" (transformers check skipped: SKIP_HF=1)"
say "greedy tokens identical across xtrain on $DEVICE, xtrain on cpu$hf_greedy: $(wc -w <"$OUT/greedy.cuda") tokens, $(tr ' ' '\n' <"$OUT/greedy.cuda" | sort -u | wc -l) distinct"

# 4. a random transformers GPT-2 imported into xtrain
if [[ "$SKIP_HF" != 1 ]]; then
  say "logits: random GPT2LMHeadModel saved by transformers, imported by xtrain"
  hf make-random --out "$OUT/hf_rand" --n-embd 96 --n-layer 3 --n-head 4 --n-positions 256 \
    --encoder-json "$DATA/gpt2/encoder.json" --vocab-bpe "$DATA/gpt2/vocab.bpe"
  dump_logits "$OUT/hf_rand" "$OUT/logits_random_"

  # 5. speed: greedy generation on a GPT-2 124M-shaped random model, batch 1 and 16
  hf make-random --out "$OUT/hf_124m" --n-embd 768 --n-layer 12 --n-head 12 --n-positions 1024 \
    --encoder-json "$DATA/gpt2/encoder.json" --vocab-bpe "$DATA/gpt2/vocab.bpe"
  head -1 "$OUT/ids.txt" >"$OUT/ids1.txt"
  for b in 1 16; do
    for d in fp32 bf16; do
      for g in auto off; do  # the one-token step as a CUDA graph, and every kernel launched
        gen --model "$OUT/hf_124m" --device "$DEVICE" --dtype "$d" --cuda-graph "$g" --prompt-ids "$(cat "$OUT/ids1.txt")" \
          --temperature 0 --ignore-eos --max-new-tokens "$SPEED_NEW" --batch "$b" --print-ids >"$OUT/speed.$d.$b.$g" \
          2>"$OUT/speed.$d.$b.$g.err" || { cat "$OUT/speed.$d.$b.$g.err"; fail "generation, $d batch $b --cuda-graph $g"; }
        sed "s/^/xtrain $d batch $b --cuda-graph $g: /" "$OUT/speed.$d.$b.$g.err"
      done
      cmp -s "$OUT/speed.$d.$b.auto" "$OUT/speed.$d.$b.off" || fail "$d batch $b: tokens differ with and without the CUDA graph"
    done
    hf generate --model "$OUT/hf_124m" --ids "$OUT/ids1.txt" --max-new-tokens "$SPEED_NEW" --ignore-eos \
      --batch "$b" 2>&1 >/dev/null
  done
else
  say "transformers GPT-2 import and speed against transformers: skipped (SKIP_HF=1)"
fi
say "all checks passed ($OUT)"
