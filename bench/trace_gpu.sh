#!/usr/bin/env bash
# Where a real training step's GPU sits idle (Nsight Systems is not needed): runs each workload for STEPS
# steps (bf16) with the CUPTI kernel tracer loaded (CUDA_INJECTION64_PATH=$BIN/libxtrain_kernel_trace.so,
# bench/kernel_trace.cpp), then bench/kernel_gaps.py on the last two complete steps: the step as the GPU
# sees it, its busy and idle time, and the largest gaps with the records on either side. The kernels run
# as in a real run (unlike under bench/profile_gpu.sh's Nsight Compute), at the clocks they get.
#   CUDA_INJECTION64_PATH=... XTRAIN_KERNEL_TRACE=F mpirun -np 1 -x CUDA_INJECTION64_PATH \
#     -x XTRAIN_KERNEL_TRACE xtrain_mpi --device cuda --dtype bf16 <workload> --steps S --val-every 0
# Exits 2 on a bad setting before running anything (the tracer is built with the CUDA build where CMake
# finds CUPTI), 1 when a workload's run or summary failed (the others still run).
# Usage: bench/trace_gpu.sh   (env: BIN=build-gpu DATA=data STEPS=10 WORKLOADS="seed gpt2_124m"
#                              LOGDIR=<tmp>; the traces stay in LOGDIR as <workload>.trace.csv; EXTRA_ARGS=""
#                              at the end of each xtrain command, e.g. "--cuda-graph off" (common.sh))
set -euo pipefail

: "${BIN:=build-gpu}" "${STEPS:=10}"
source "$(dirname "$0")/common.sh"
xt_help "$@"
xt_require_bin "$BIN"
WORKLOADS=${WORKLOADS:-"seed gpt2_124m"}
TRACER=$(cd "$BIN" && pwd)/libxtrain_kernel_trace.so
[[ -f $TRACER ]] || { echo "trace_gpu.sh: $TRACER not found (CMake builds it where it finds CUPTI's libcupti)" >&2; exit 2; }
# steps 3 and up: the first carries the warm-up, the second records the CUDA graph (--cuda-graph)
[[ $STEPS =~ ^[0-9]+$ ]] && (( STEPS >= 4 )) ||
  { echo "trace_gpu.sh: STEPS must be an integer >= 4 (two steps after the warm-up and graph recording; got '$STEPS')" >&2; exit 2; }
xt_logdir
# shellcheck disable=SC2086  # a list of names
xt_check_workloads $WORKLOADS

failed=0
for w in $WORKLOADS; do
  xt_step_cmd "$w"
  trace="$LOGDIR/$w.trace.csv" log="$LOGDIR/$w.log"
  rm -f "$trace"
  if ! CUDA_INJECTION64_PATH=$TRACER XTRAIN_KERNEL_TRACE=$trace xt_train "$log" "$LOGDIR/$w.unused.jsonl" \
      mpirun --allow-run-as-root -np 1 -x CUDA_INJECTION64_PATH -x XTRAIN_KERNEL_TRACE "${XT_CMD[@]}"; then
    echo "trace_gpu.sh: $w failed, see $log" >&2
    failed=1
    continue
  fi
  echo "== $XT_STEP_LABEL, bf16, steps $((STEPS - 1))-$STEPS of $STEPS"
  "$PY" "$XT_BENCH_DIR/kernel_gaps.py" "$trace" 2 12 || failed=1
done
exit "$failed"
