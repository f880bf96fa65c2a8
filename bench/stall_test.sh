#!/usr/bin/env bash
# Runs on a 2-GPU machine from the repository root (data/; BIN, the directory of xtrain_mpi, default build-gpu), output in $OUT.
# SIGSTOP of rank 1 (alive but silent, so mpirun sees no dead process) once the job logs its first step
# (with --cuda-graph on in EXTRA_ARGS: once the step is recorded): rank 0 must leave the NCCL
# collective through the --comm-timeout watchdog (10 s, or the last --comm-timeout of EXTRA_ARGS), name
# rank, step and operation, and end the job. Fails (exit 1) unless the job exits non-zero within that
# timeout + 20 s of the stop with an error line naming rank 0, the step and "did not finish within N s",
# or when the job ends before it could be stopped.
# EXTRA_ARGS="" goes at the end of the command (e.g. "--cuda-graph on": the stall inside a launched graph).
source "$(dirname "$0")/common.sh"
xt_help "$@"
: "${OUT:?stall_test.sh: set OUT to the output directory}"
BIN=${BIN:-build-gpu}  # the directory of the CUDA build's programs, as in every bench script
XT=$BIN/xtrain_mpi
D="${XT_DATA_ARGS[*]} $(xt_workload_model design)"
mpirun --allow-run-as-root --bind-to none -np 2 $XT $D --device cuda --dtype bf16 --batch 64 --steps 100000 --val-every 0 --log-every 50 --comm-timeout 10 ${XT_EXTRA_ARGS[*]} > $OUT/stall.log 2>&1 &
job=$!
# what EXTRA_ARGS sets (its last value wins, as in xtrain): the deadline, and whether the step is recorded
timeout_s=10 graph=off
for ((i = 0; i < ${#XT_EXTRA_ARGS[@]}; i++)); do
  a=${XT_EXTRA_ARGS[i]} next=${XT_EXTRA_ARGS[i + 1]:-}
  case $a in
    --comm-timeout) timeout_s=$next ;; --comm-timeout=*) timeout_s=${a#*=} ;;
    --cuda-graph) graph=$next ;; --cuda-graph=*) graph=${a#*=} ;;
  esac
done
ready='^step'  # training has started
[[ $graph == on ]] && ready="^cuda graph: step [0-9]+'s forward and backward with the gradient all-reduce recorded"
fail() { echo "stall_test.sh: FAILED: $*"; sed -n '1,40p' $OUT/stall.log; pkill -9 -f "$XT"; exit 1; }
victim=""
for _ in $(seq 1200); do
  kill -0 $job 2>/dev/null || fail "the job ended before rank 1 could be stopped"
  for p in $(pgrep -f "$XT"); do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p; done
  [ -n "$victim" ] && grep -qE "$ready" $OUT/stall.log && break; sleep 0.1
done
[ -n "$victim" ] && grep -qE "$ready" $OUT/stall.log || fail "no rank 1 process or no line matching '$ready' within 120 s"
t0=$(date +%s.%N); kill -STOP $victim
if timeout $((timeout_s + 50)) tail --pid=$job -f /dev/null; then wait $job; rc=$?; else rc="none (still running $((timeout_s + 50)) s after the stop)"; fi
t1=$(date +%s.%N)
secs=$(python3 -c "print(f'{$t1-$t0:.1f}')")
echo "job exit $rc, $secs s after SIGSTOP of rank 1 (comm-timeout $timeout_s s); left: $(pgrep -f $XT | wc -l)"
grep -E "^rank|timeout|abort|NCCL" $OUT/stall.log | head -5
[[ "$rc" =~ ^[0-9]+$ && "$rc" != 0 ]] || fail "job exit status $rc (want non-zero)"
python3 -c "import sys; sys.exit(0 if $secs <= $timeout_s + 20 else 1)" || fail "ended $secs s after the stop (want <= $timeout_s + 20 s)"
grep -qE "^rank 0 .*step [0-9]+: .*did not finish within $timeout_s s" $OUT/stall.log ||
  fail "no error line naming rank 0, the step and the $timeout_s s deadline"
pkill -9 -f "$XT"
echo "stall_test.sh: ok"
