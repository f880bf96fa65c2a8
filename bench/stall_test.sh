#!/usr/bin/env bash
# Runs on a 2-GPU machine from the repository root (build-gpu/xtrain_mpi, data/), output in $OUT.
# SIGSTOP of rank 1 (alive but silent, so mpirun sees no dead process): rank 0 must leave the NCCL
# collective through the --comm-timeout watchdog, name rank, step and operation, and end the job.
# EXTRA_ARGS="" goes at the end of the command (e.g. "--cuda-graph on": the stall inside a launched graph).
source "$(dirname "$0")/common.sh"
xt_help "$@"
: "${OUT:?stall_test.sh: set OUT to the output directory}"
BIN=build-gpu/xtrain_mpi
D="${XT_DATA_ARGS[*]} $(xt_workload_model design)"
mpirun --allow-run-as-root --bind-to none -np 2 $BIN $D --device cuda --dtype bf16 --batch 64 --steps 100000 --val-every 0 --log-every 50 --comm-timeout 10 ${XT_EXTRA_ARGS[*]} > $OUT/stall.log 2>&1 &
job=$!
victim=""
for _ in $(seq 600); do
  for p in $(pgrep -f "$BIN"); do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p; done
  [ -n "$victim" ] && grep -q "^step" $OUT/stall.log && break; sleep 0.1
done
t0=$(date +%s.%N); kill -STOP $victim
if timeout 60 tail --pid=$job -f /dev/null; then wait $job; rc=$?; else rc="none (still running after 60 s)"; fi
t1=$(date +%s.%N)
echo "job exit $rc, $(python3 -c "print(f'{$t1-$t0:.1f}')") s after SIGSTOP of rank 1 (comm-timeout 10 s); left: $(pgrep -f $BIN | wc -l)"
grep -E "^rank|timeout|abort|NCCL" $OUT/stall.log | head -5
pkill -9 -f $BIN; true
