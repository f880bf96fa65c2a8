#!/usr/bin/env bash
# A rank stopped before it finishes MPI start-up (here: SIGSTOP before it even calls MPI_Init_thread,
# so rank 0 waits in MPI_Init_thread / the node split, which have no bounded form) must not hang the
# job: rank 0's start-up watchdog (src/comm/mpi/startup_watchdog.h) ends it with one line naming
# the rank and the deadline, and the job ends non-zero within --comm-timeout + kSlackS.
source "$(dirname "$0")/common.sh"
xt_data
kTimeoutS=4
kSlackS=20  # mpirun noticing the failed rank and killing the stopped one; seen: ~1 s
kHangS=90   # well past the deadline: the job is taken as hung and killed

mine="$WORK/startup.jsonl"  # in this run's command line only (WORK is a fresh mktemp directory)
cleanup() { for p in $(pgrep -f "$mine"); do kill -9 "$p" 2>/dev/null || true; done; }
xt_at_exit cleanup
t0=$(date +%s.%N)
rc=0
# rank 1 stops itself before exec (the launcher sees a live process that never joins)
timeout -s KILL $kHangS "${MPIRUN[@]}" -np 2 bash -c \
  'if [[ ${OMPI_COMM_WORLD_RANK:-} == 1 ]]; then kill -STOP $$; fi; exec "$@"' rank_stop "$XT" "${DATA[@]}" "${TINY[@]}" \
  --steps 1 --comm-timeout $kTimeoutS --metrics "$mine" > "$WORK/run.log" 2>&1 || rc=$?
elapsed=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
cat "$WORK/run.log"
[[ $rc -ne 0 && $rc -ne 137 ]] || fail "exit $rc: expected the job to end non-zero by itself (137: killed as hung after ${kHangS} s)"
grep -q "^rank 0 ([^)]*): error: start-up did not finish within $kTimeoutS s (MPI_Init_thread / node split); a rank may be stopped or unreachable$" \
  "$WORK/run.log" || fail "no start-up deadline line from rank 0"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$elapsed" $((kTimeoutS + kSlackS)) ||
  fail "the job took ${elapsed} s, more than --comm-timeout + ${kSlackS} s"
sleep 1
[[ -z $(pgrep -f "$mine") ]] || fail "processes of the job are left"
xt_finish "PASS: a rank stopped before MPI start-up ended the job in ${elapsed} s (--comm-timeout $kTimeoutS)"
