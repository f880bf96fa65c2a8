#!/bin/bash
# coldstart_cpu.sh BIN_BEFORE BIN_AFTER MODEL_DIR [ROUNDS]: xtrain_generate's cold start, two builds side by side.
# Each round runs, in turn, BIN_BEFORE and BIN_AFTER with the directory's own tokenizer, then BIN_AFTER with its
# GPT-2 pair (vocab.json + merges.txt: the tokenizer table cache's path); one line per run: the process's wall time
# (launch to exit, one new token) and the --timing phases backend set-up, model read, tokenizer, the wait for the
# backend, weights to the device, first token, and the process start to the first token.
# bench/results/coldstart_cpu_2026-12.md: the figures and how MODEL_DIR was made.
set -euo pipefail
before=$1 after=$2 M=$3 rounds=${4:-5}
err=$(mktemp)
trap 'rm -f "$err"' EXIT
run() {  # label bin extra...
  local label=$1 bin=$2
  shift 2
  local t0 t1
  t0=$(date +%s%N)
  "$bin" --model "$M" --prompt "The jury said" --max-new-tokens 1 --temperature 0 --timing "$@" > /dev/null 2> "$err"
  t1=$(date +%s%N)
  echo "$label wall $(( (t1 - t0) / 1000000 ))" $(grep "^timing" "$err" |
    grep -E "backend set-up|reading the model|loading the tokenizer|waiting for the backend|weights to|prompt to first|process start" |
    sed -E 's/timing \| ([a-z -]+)[^:]*: ([0-9.]+) ms/| \1 \2/')
}
for r in $(seq "$rounds"); do
  run before "$before"
  run after "$after"
  run after_gpt2_pair "$after" --encoder-json "$M/vocab.json" --vocab-bpe "$M/merges.txt"
done
