#!/usr/bin/env bash
# FP8 loss parity and speed on one GPU: for each workload (bench_gpu.sh's shapes and data), two training runs
# from the same seed on the same data, --dtype bf16 and --dtype bf16 --fp8 FP8, each
#   mpirun -np 1 xtrain_mpi --device cuda --dtype bf16 <workload, batch BATCH_<workload>> --steps STEPS
#          --val-every VAL_EVERY [--fp8 FP8] --metrics F
# (the default schedule: linear warmup, cosine decay; validation on the held-out tail of the corpus), and one JSON
# line per workload: both runs' validation losses at every evaluation, the final ones and their difference
# (fp8 - bf16; the goal: |difference| <= 0.01), and each run's steady tok/s and peak memory (steps after the
# first WARMUP, bench/steady.py).
# Exits 1 when a run failed (its line says so; the others still run), 2 on a bad setting.
# Usage: bench/fp8_parity.sh   (env: BIN=build-gpu DATA=data STEPS=2000 VAL_EVERY=250 WARMUP=5 FP8=mlp,head
#                               WORKLOADS="smollm_135m llama32_1b" BATCH_smollm_135m=4 BATCH_llama32_1b=2
#                               LOGDIR=<tmp> EXTRA_ARGS="" PY=python3)
set -euo pipefail
set -f

: "${BIN:=build-gpu}" "${STEPS:=2000}" "${VAL_EVERY:=250}" "${WARMUP:=5}" "${FP8:=mlp,head}"
: "${WORKLOADS:=smollm_135m llama32_1b}" "${BATCH_smollm_135m:=4}" "${BATCH_llama32_1b:=2}"
source "$(dirname "$0")/common.sh"
xt_help "$@"
bad() { echo "fp8_parity.sh: $*" >&2; exit 2; }
[[ $STEPS =~ ^[1-9][0-9]*$ ]] || bad "STEPS must be a positive integer (got '$STEPS')"
[[ $VAL_EVERY =~ ^[1-9][0-9]*$ ]] || bad "VAL_EVERY must be a positive integer (got '$VAL_EVERY')"
# shellcheck disable=SC2086
xt_check_workloads $WORKLOADS
for w in $WORKLOADS; do
  batch_var="BATCH_$w"
  [[ ${!batch_var:-} =~ ^[1-9][0-9]*$ ]] || bad "$batch_var must be a positive integer (got '${!batch_var:-}')"
done
xt_require_bin "$BIN"
xt_logdir

failed=0
for w in $WORKLOADS; do
  batch_var="BATCH_$w"
  batch=${!batch_var}
  model=$(xt_workload_model "$w")
  runs=()
  for mode in bf16 fp8; do
    log="$LOGDIR/$w.$mode.log" metrics="$LOGDIR/$w.$mode.jsonl"
    fp8_args=""
    [[ $mode == fp8 ]] && fp8_args="--fp8 $FP8"
    cmd="mpirun --allow-run-as-root -np 1 $BIN/xtrain_mpi --device cuda --dtype bf16 $model --batch $batch
         $(xt_workload_data "$w") --steps $STEPS --val-every $VAL_EVERY --log-every 100 $fp8_args
         --metrics $metrics ${XT_EXTRA_ARGS[*]}"
    cmd=$(echo $cmd)
    # shellcheck disable=SC2086
    if ! xt_train "$log" "$metrics" $cmd; then
      echo "{\"workload\": \"$w\", \"mode\": \"$mode\", \"error\": \"run failed, see $log\"}"
      failed=1
      continue 2
    fi
    runs+=("$metrics" "$cmd")
  done
  "$PY" - "$w" "$FP8" "$WARMUP" "${runs[@]}" <<'EOF'
import json, os, sys
sys.path.insert(0, os.environ["XT_BENCH_DIR"])
from steady import steady
w, fp8, warmup, m16, c16, m8, c8 = sys.argv[1:8]
def vals(path):
    return [(r["step"], r["val_loss"]) for r in map(json.loads, open(path)) if r.get("type") == "val"]
v16, v8 = vals(m16), vals(m8)
s16, s8 = steady(m16, int(warmup)), steady(m8, int(warmup))
rec = {"workload": w, "fp8": fp8, "steps": v16[-1][0] if v16 else None,
       "val_loss_bf16": round(v16[-1][1], 4), "val_loss_fp8": round(v8[-1][1], 4),
       "difference": round(v8[-1][1] - v16[-1][1], 4),
       "val_curve_bf16": [[s, round(v, 4)] for s, v in v16], "val_curve_fp8": [[s, round(v, 4)] for s, v in v8],
       "tok_per_s_bf16": round(s16["tok_per_s"]), "tok_per_s_fp8": round(s8["tok_per_s"]),
       "speedup": round(s8["tok_per_s"] / s16["tok_per_s"], 3),
       "peak_device_mib_bf16": s16["peak_device_mib"], "peak_device_mib_fp8": s8["peak_device_mib"],
       "command_bf16": c16, "command_fp8": c8}
print(json.dumps(rec))
EOF
done
exit "$failed"
