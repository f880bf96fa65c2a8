#!/usr/bin/env bash
# Activation recompute on one GPU: GPT-2 124M (T = 1024) in bf16 at several per-GPU batches, each with
# --recompute 0, 1 and 2, for STEPS steps:
#   mpirun -np 1 xtrain_mpi --device cuda --dtype bf16 <GPT-2 124M> --batch B --recompute R --metrics F
# Prints a markdown table: steady-state tok/s (tokens per step / mean step ms of the steps after the
# first WARMUP), the peak device memory (the final record's peak_memory_bytes, the caching allocator's
# peak reservation), the last loss (equal across R at one batch: recompute is bitwise) and the
# commands. A run that does not fit (refused by the memory estimate, or out of memory) is a row saying
# so, and the table goes on; a run that fails otherwise is a row with xtrain's error line, and the script
# exits 1 at the end.
# Usage: bench/recompute_gpu.sh   (env: BIN=build-gpu DATA=data STEPS=20 WARMUP=5 BATCHES="16 32 64"
#                                  RECOMPUTE="0 1 2" LOGDIR=<tmp> EXTRA_ARGS="" at the end of each
#                                  xtrain command, common.sh)
set -euo pipefail
set -f  # the commands are kept as one line of words and split unquoted: no pathname expansion of them

: "${BIN:=build-gpu}" "${STEPS:=20}" "${WARMUP:=5}"
source "$(dirname "$0")/common.sh"
xt_help "$@"
xt_require_bin "$BIN"
BATCHES=${BATCHES:-"16 32 64"}
RECOMPUTE=${RECOMPUTE:-"0 1 2"}
xt_logdir
MODEL=$(xt_workload_model gpt2_124m)

echo "GPT-2 124M, bf16, one GPU ($(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null || echo unknown GPU)), $STEPS steps, tok/s after step $WARMUP; logs in $LOGDIR"
echo
echo "| batch (seqs) | --recompute | tok/s | peak memory (MiB) | last loss | note |"
echo "|---|---|---|---|---|---|"
failed=0
for b in $BATCHES; do
  for r in $RECOMPUTE; do
    log="$LOGDIR/b$b.r$r.log" metrics="$LOGDIR/b$b.r$r.jsonl"
    cmd="mpirun --allow-run-as-root -np 1 $BIN/xtrain_mpi --device cuda --dtype bf16 $MODEL --batch $b
         --recompute $r ${XT_DATA_ARGS[*]} --val-every 0 --steps $STEPS --log-every 10 --metrics $metrics
         ${XT_EXTRA_ARGS[*]}"
    cmd=$(echo $cmd)  # one line
    # shellcheck disable=SC2086  # the command is one line of words, as recorded
    if ! xt_train "$log" "$metrics" $cmd 2>/dev/null; then
      if grep -q "the model needs about" "$log"; then
        note="does not fit: $(grep -o 'needs about [0-9.]* GiB per rank' "$log" | head -1 || true) (memory estimate)"
      elif grep -qi "out of memory" "$log"; then
        note="out of memory"
      else
        note="failed: $(xt_error_line "$log" | tail -1 | cut -c1-160)"
        failed=1
      fi
      echo "| $b | $r | - | - | - | $note (see $log) |"
      continue
    fi
    "$PY" - "$b" "$r" "$metrics" "$WARMUP" <<'PY'
import os, sys
sys.path.insert(0, os.environ["XT_BENCH_DIR"])
from steady import steady
b, r, metrics, warmup = sys.argv[1:5]
s = steady(metrics, int(warmup))
peak = s["peak_device_mib"]
print(f"| {b} | {r} | {s['tok_per_s']:,.0f} | {peak:,.0f} | {s['final_loss']!r} | |" if peak else
      f"| {b} | {r} | {s['tok_per_s']:,.0f} | - | {s['final_loss']!r} | no peak memory recorded |")
PY
  done
done
echo
echo "Commands: $LOGDIR/*.cmd"
exit "$failed"
