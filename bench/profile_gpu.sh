#!/usr/bin/env bash
# Where a training step's GPU time goes, per kernel: runs each workload for STEPS steps (bf16) under
# Nsight Compute, recording only each kernel's duration (gpu__time_duration.sum, one pass, clocks left
# as they are), and prints bench/ncu_summary.py's table of the last complete step (kernels grouped by
# name, calls, total us, share of the step's kernel time, then op families).
#   mpirun -np 1 ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file F \
#     xtrain_mpi --device cuda --dtype bf16 <workload> --steps S --val-every 0
# ncu runs the kernels one at a time with its own cache handling, so a small kernel's time is an upper
# bound and the sum can exceed a real step's time a little; the step time to compare with is
# bench/bench_gpu.sh's.
# Exits 2 on a bad setting before running anything, 1 when a workload's run or summary failed (the others
# still run). Usage: bench/profile_gpu.sh   (env: BIN=build-gpu DATA=data STEPS=4 WORKLOADS="seed gpt2_124m"
#                                 LOGDIR=<tmp> NCU=ncu, else /usr/local/cuda/bin/ncu; EXTRA_ARGS="" at the end
#                                 of each xtrain command, e.g. "--cuda-graph off" (common.sh))
set -euo pipefail

: "${BIN:=build-gpu}" "${STEPS:=4}"
source "$(dirname "$0")/common.sh"
xt_help "$@"
xt_require_bin "$BIN"
WORKLOADS=${WORKLOADS:-"seed gpt2_124m"}
if [[ -z ${NCU:-} ]]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
fi
[[ -x $NCU ]] || { echo "profile_gpu.sh: Nsight Compute (ncu) not found; set NCU" >&2; exit 2; }
(( STEPS >= 2 )) || { echo "profile_gpu.sh: STEPS must be >= 2 (the first step carries warm-up; got $STEPS)" >&2; exit 2; }
xt_logdir
# shellcheck disable=SC2086  # a list of names
xt_check_workloads $WORKLOADS

failed=0
for w in $WORKLOADS; do
  xt_step_cmd "$w"
  csv="$LOGDIR/$w.ncu.csv" log="$LOGDIR/$w.log"
  if ! xt_train "$log" "$LOGDIR/$w.unused.jsonl" mpirun --allow-run-as-root -np 1 "$NCU" --clock-control none \
      --metrics gpu__time_duration.sum --csv --log-file "$csv" "${XT_CMD[@]}"; then
    echo "profile_gpu.sh: $w failed, see $log" >&2
    failed=1
    continue
  fi
  echo "== $XT_STEP_LABEL, bf16, step $STEPS of $STEPS"
  "$PY" "$XT_BENCH_DIR/ncu_summary.py" "$csv" || failed=1
done
exit "$failed"
