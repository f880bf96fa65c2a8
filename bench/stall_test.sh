#!/usr/bin/env bash
# Runs on a 2-GPU machine from the repository root (data/; BIN, default build-gpu/xtrain_mpi), output in $OUT.
# SIGSTOP of rank 1 (alive but silent, so mpirun sees no dead process) once the job logs its first step
# (with "--cuda-graph on" in EXTRA_ARGS: once the step is recorded): rank 0 must leave the NCCL
# collective through the --comm-timeout watchdog (10 s), name rank, step and operation, and end the job.
# Fails (exit 1) unless the job exits non-zero within 30 s of the stop with an error line that names
# rank 0, the step and "did not finish within 10 s".
# EXTRA_ARGS="" goes at the end of the command (e.g. "--cuda-graph on": the stall inside a launched graph).
source "$(dirname "$0")/common.sh"
xt_help "$@"
: "${OUT:?stall_test.sh: set OUT to the output directory}"
BIN=${BIN:-build-gpu/xtrain_mpi}
D="${XT_DATA_ARGS[*]} $(xt_workload_model design)"
mpirun --allow-run-as-root --bind-to none -np 2 $BIN $D --device cuda --dtype bf16 --batch 64 --steps 100000 --val-every 0 --log-every 50 --comm-timeout 10 ${XT_EXTRA_ARGS[*]} > $OUT/stall.log 2>&1 &
job=$!
ready='^step'  # training has started
[[ " ${XT_EXTRA_ARGS[*]} " == *" --cuda-graph on "* ]] && ready='^cuda graph: .*recorded'
victim=""
for _ in $(seq 1200); do
  for p in $(pgrep -f "$BIN"); do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p; done
  [ -n "$victim" ] && grep -q "$ready" $OUT/stall.log && break; sleep 0.1
done
fail() { echo "stall_test.sh: FAILED: $*"; sed -n '1,40p' $OUT/stall.log; pkill -9 -f "$BIN"; exit 1; }
[ -n "$victim" ] && grep -q "$ready" $OUT/stall.log || fail "no rank 1 process or no line matching '$ready' within 120 s"
t0=$(date +%s.%N); kill -STOP $victim
if timeout 60 tail --pid=$job -f /dev/null; then wait $job; rc=$?; else rc="none (still running after 60 s)"; fi
t1=$(date +%s.%N)
secs=$(python3 -c "print(f'{$t1-$t0:.1f}')")
echo "job exit $rc, $secs s after SIGSTOP of rank 1 (comm-timeout 10 s); left: $(pgrep -f $BIN | wc -l)"
grep -E "^rank|timeout|abort|NCCL" $OUT/stall.log | head -5
[[ "$rc" =~ ^[0-9]+$ && "$rc" != 0 ]] || fail "job exit status $rc (want non-zero)"
python3 -c "import sys; sys.exit(0 if $secs <= 30 else 1)" || fail "ended $secs s after the stop (want <= 30 s)"
grep -qE "^rank 0 .*step [0-9]+: .*did not finish within 10 s" $OUT/stall.log || fail "no error line naming rank 0, the step and the deadline"
pkill -9 -f "$BIN"
echo "stall_test.sh: ok"
