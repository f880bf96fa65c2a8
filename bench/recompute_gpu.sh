#!/usr/bin/env bash
# Activation recompute on one GPU: GPT-2 124M (T = 1024) in bf16 at several per-GPU batches, each with
# --recompute 0, 1 and 2, for STEPS steps:
#   mpirun -np 1 xtrain_mpi --device cuda --dtype bf16 <GPT-2 124M> --batch B --recompute R --metrics F
# Prints a markdown table: steady-state tok/s (tokens per step / mean step ms of the steps after the
# first WARMUP), the peak device memory (the final record's peak_memory_bytes, the caching allocator's
# peak reservation), the last loss (equal across R at one batch: recompute is bitwise) and the
# commands. A run that does not fit (refused by the memory estimate, or out of memory) is a row saying
# so, and the table goes on.
# Usage: bench/recompute_gpu.sh   (env: BIN=build-gpu DATA=data STEPS=20 WARMUP=5 BATCHES="16 32 64"
#                                  RECOMPUTE="0 1 2" LOGDIR=<tmp>)
set -euo pipefail

BIN=${BIN:-build-gpu}
DATA=${DATA:-data}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
BATCHES=${BATCHES:-"16 32 64"}
RECOMPUTE=${RECOMPUTE:-"0 1 2"}
LOGDIR=${LOGDIR:-$(mktemp -d)}
mkdir -p "$LOGDIR"
MODEL="--dim 768 --heads 12 --head-dim 64 --layers 12 --ffn 3072 --seq 1024"

echo "GPT-2 124M, bf16, one GPU ($(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null || echo unknown GPU)), $STEPS steps, tok/s after step $WARMUP; logs in $LOGDIR"
echo
echo "| batch (seqs) | --recompute | tok/s | peak memory (MiB) | last loss | note |"
echo "|---|---|---|---|---|---|"
for b in $BATCHES; do
  for r in $RECOMPUTE; do
    log="$LOGDIR/b$b.r$r.log" metrics="$LOGDIR/b$b.r$r.jsonl"
    rm -f "$metrics"
    cmd="mpirun --allow-run-as-root -np 1 $BIN/xtrain_mpi --device cuda --dtype bf16 $MODEL --batch $b
         --recompute $r --data $DATA/brown.txt --encoder-json $DATA/gpt2/encoder.json
         --vocab-bpe $DATA/gpt2/vocab.bpe --val-every 0 --steps $STEPS --log-every 10 --metrics $metrics"
    cmd=$(echo $cmd)  # one line
    echo "$cmd" > "$LOGDIR/b$b.r$r.cmd"
    if ! $cmd >"$log" 2>&1; then
      if grep -q "the model needs about" "$log"; then
        note="does not fit: $(grep -o 'needs about [0-9.]* GiB per rank' "$log" | head -1 || true) (memory estimate)"
      elif grep -qi "out of memory" "$log"; then
        note="out of memory"
      else
        note="failed: $(grep -m1 -i 'error' "$log" | cut -c1-120 || true)"
      fi
      echo "| $b | $r | - | - | - | $note (see $log) |"
      continue
    fi
    python3 - "$b" "$r" "$metrics" "$WARMUP" <<'PY'
import json, sys
b, r, metrics, warmup = sys.argv[1:5]
rows = [json.loads(l) for l in open(metrics) if l.strip()]
train = [x for x in rows if x.get("type") == "train"]
final = [x for x in rows if x.get("type") == "final"][-1]
timed = [x for x in train if x["step"] > int(warmup)]
ms = sum(x["ms"] for x in timed) / len(timed)
tok_s = final["tokens_seen"] // final["step"] / (ms / 1e3)
peak = final.get("peak_memory_bytes")
print(f"| {b} | {r} | {tok_s:,.0f} | {peak / 2**20:,.0f} | {train[-1]['loss']!r} | |" if peak else
      f"| {b} | {r} | {tok_s:,.0f} | - | {train[-1]['loss']!r} | no peak memory recorded |")
PY
  done
done
echo
echo "Commands: $LOGDIR/*.cmd"
