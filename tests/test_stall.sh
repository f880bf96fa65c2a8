#!/usr/bin/env bash
# A rank that is alive but stuck must not hang the job. Two CPU ranks train; rank 1 is stopped
# (SIGSTOP: mpirun sees no dead process). Rank 0's next collective must give up after --comm-timeout
# (3 s) with one line naming its rank, host, the step and the operation, and the whole job must end
# non-zero within kBoundS, leaving no xtrain_mpi behind.
source "$(dirname "$0")/common.sh"
xt_data
kTimeoutS=3
kBoundS=30  # comm-timeout + MPI_Abort tearing down both ranks; seen: 4.6 s

# The token cache first (one rank), so the long run starts training at once.
"${MPIRUN[@]}" -np 1 "$XT" "${DATA[@]}" "${TINY[@]}" --steps 1 >"$WORK/cache.log" 2>&1 || { cat "$WORK/cache.log"; exit 1; }

"${MPIRUN[@]}" -np 2 "$XT" "${DATA[@]}" "${TINY[@]}" --steps 1000000 --log-every 1000 --comm-timeout $kTimeoutS \
  --metrics "$WORK/long.jsonl" >"$WORK/long.log" 2>&1 &
job=$!
mine="$WORK/long.jsonl"  # in this run's command line only (WORK is a fresh mktemp directory)
cleanup() { kill -9 "$job" 2>/dev/null || true; pkill -9 -f "$mine" 2>/dev/null || true; }
trap 'cleanup; rm -rf "$WORK"' EXIT

# rank 1's pid: the xtrain_mpi child of this job whose environment says OMPI_COMM_WORLD_RANK=1
victim=""
t0=$SECONDS
until [[ -n "$victim" && -f "$WORK/long.jsonl" ]] && (($(grep -c '"train"' "$WORK/long.jsonl") >= 3)); do
  kill -0 "$job" 2>/dev/null || { cat "$WORK/long.log"; echo "FAIL: the run ended before the stop"; exit 1; }
  ((SECONDS - t0 < 60)) || { cat "$WORK/long.log"; echo "FAIL: no training after 60 s"; exit 1; }
  for p in $(pgrep -f "$mine"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
  done
  sleep 0.2
done
echo "training ($(grep -c '"train"' "$WORK/long.jsonl") steps); SIGSTOP rank 1 (pid $victim)"
kill -STOP "$victim"
t_stop=$(date +%s.%N)

while kill -0 "$job" 2>/dev/null; do
  if (($(date +%s) - ${t_stop%.*} > kBoundS)); then
    kill -CONT "$victim" 2>/dev/null
    tail -n 20 "$WORK/long.log"
    echo "FAIL: job still running ${kBoundS} s after rank 1 was stopped"
    exit 1
  fi
  sleep 0.1
done
rc=0
wait "$job" || rc=$?
elapsed=$(python3 -c "import time; print(f'{time.time() - $t_stop:.1f}')")
tail -n 8 "$WORK/long.log"
echo "job exit $rc, ended ${elapsed} s after SIGSTOP of rank 1 (comm-timeout ${kTimeoutS} s, bound ${kBoundS} s)"
((rc != 0)) || { echo "FAIL: the job exited 0"; exit 1; }
grep -Eq "^rank 0 \(.*\): error: .*step [0-9]+.*did not finish within $kTimeoutS s" "$WORK/long.log" ||
  { echo "FAIL: no one-line error naming rank 0, the step and the timeout"; exit 1; }
left=$({ pgrep -f "$mine" || true; } | wc -l)
((left == 0)) || { echo "FAIL: $left xtrain_mpi processes left"; exit 1; }
echo "PASS"
