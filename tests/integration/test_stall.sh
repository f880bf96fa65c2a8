#!/usr/bin/env bash
# A rank that is alive but stuck must not hang the job. Two CPU ranks train, with the gradient
# all-reduce in several buckets started during the backward pass (--bucket-mb 0.05); rank 1
# is stopped (SIGSTOP: mpirun sees no dead process). Rank 0's next collective, the wait for its buckets,
# must give up after --comm-timeout (3 s) with one line naming its rank, host, the step and the
# bucket, and the whole job must end
# non-zero within kBoundS, leaving no xtrain_mpi behind. Then the same during start-up: rank 1 is
# stopped while rank 0 tokenizes a corpus for many seconds; the job must end within --comm-timeout
# + kStartupSlackS of the stop, long before the tokenizing would be done.
source "$(dirname "$0")/common.sh"
xt_data
kTimeoutS=3
kBoundS=30  # comm-timeout + MPI_Abort tearing down both ranks; seen: 4.6 s

# The token cache first (one rank), so the long run starts training at once.
"${MPIRUN[@]}" -np 1 "$XT" "${DATA[@]}" "${TINY[@]}" --steps 1 >"$WORK/cache.log" 2>&1 || { cat "$WORK/cache.log"; fatal "the token cache run"; }

"${MPIRUN[@]}" -np 2 "$XT" "${DATA[@]}" "${TINY[@]}" --steps 1000000 --log-every 1000 --comm-timeout $kTimeoutS \
  --bucket-mb 0.05 --metrics "$WORK/long.jsonl" >"$WORK/long.log" 2>&1 &
job=$!
mine="$WORK/long.jsonl"  # in this run's command line only (WORK is a fresh mktemp directory)
cleanup() { kill -9 "$job" 2>/dev/null || true; pkill -9 -f "$mine" 2>/dev/null || true; }
xt_at_exit cleanup

# rank 1's pid: the xtrain_mpi child of this job whose environment says OMPI_COMM_WORLD_RANK=1
victim=""
t0=$SECONDS
until [[ -n "$victim" && -f "$WORK/long.jsonl" ]] && (($(grep -c '"train"' "$WORK/long.jsonl") >= 3)); do
  kill -0 "$job" 2>/dev/null || { cat "$WORK/long.log"; fatal "the run ended before the stop"; }
  ((SECONDS - t0 < 60)) || { cat "$WORK/long.log"; fatal "no training after 60 s"; }
  victim=$(rank_pid "$mine" 1)
  sleep 0.2
done
echo "training ($(grep -c '"train"' "$WORK/long.jsonl") steps); SIGSTOP rank 1 (pid $victim)"
kill -STOP "$victim"
t_stop=$(date +%s.%N)

while kill -0 "$job" 2>/dev/null; do
  if (($(date +%s) - ${t_stop%.*} > kBoundS)); then
    kill -CONT "$victim" 2>/dev/null
    tail -n 20 "$WORK/long.log"
    fatal "job still running ${kBoundS} s after rank 1 was stopped"
  fi
  sleep 0.1
done
rc=0
wait "$job" || rc=$?
elapsed=$(python3 -c "import time; print(f'{time.time() - $t_stop:.1f}')")
tail -n 8 "$WORK/long.log"
grep -m1 "^rank 0 (.*): error" "$WORK/long.log" || true
echo "job exit $rc, ended ${elapsed} s after SIGSTOP of rank 1 (comm-timeout ${kTimeoutS} s, bound ${kBoundS} s)"
((rc != 0)) || fatal "the job exited 0"
grep -Eq "^rank 0 \(.*\): error: .*step [0-9]+.*gradient bucket [0-9]+ of [0-9]+.*did not finish within $kTimeoutS s" "$WORK/long.log" ||
  { fatal "no one-line error naming rank 0, the step, the bucket and the timeout"; }
left=$({ pgrep -f "$mine" || true; } | wc -l)
((left == 0)) || fatal "$left xtrain_mpi processes left"

# --- start-up: the ranks tokenize ~40 MB (--no-cache: each in memory, many seconds); rank 1 is stopped
kStartupSlackS=10  # MPI_Abort tearing down both ranks; seen: 3.5 s on a loaded 2-core VM
for _ in $(seq 100); do cat "$WORK/corpus.txt"; done >"$WORK/big.txt"
mine="$WORK/startup.jsonl"
"${MPIRUN[@]}" -np 2 "$XT" "${DATA[@]}" "${TINY[@]}" --data "$WORK/big.txt" --no-cache --steps 10 --comm-timeout $kTimeoutS \
  --metrics "$mine" >"$WORK/startup.log" 2>&1 &
job=$!
cpu_ticks() { awk '{print $14}' "/proc/$1/stat" 2>/dev/null || echo 0; }
r0="" r1="" t0=$SECONDS
# Rank 0 has used 0.5 s of CPU: it is tokenizing, so both ranks are past MPI_Init and the first
# collectives, and meet once a second while they tokenize (agree_while_working).
until [[ -n "$r0" && -n "$r1" ]] && (($(cpu_ticks "$r0") >= $(getconf CLK_TCK) / 2)); do
  kill -0 "$job" 2>/dev/null || { cat "$WORK/startup.log"; fatal "the start-up run ended early"; }
  ((SECONDS - t0 < 60)) || { cat "$WORK/startup.log"; fatal "rank 0 not tokenizing after 60 s"; }
  r0=$(rank_pid "$mine" 0) r1=$(rank_pid "$mine" 1)
  sleep 0.1
done
[[ ! -s "$mine" ]] || fatal "training had started; the stop is not during start-up"
echo "rank 0 tokenizing; SIGSTOP rank 1 (pid $r1) during start-up"
kill -STOP "$r1"
t_stop=$(date +%s.%N)
bound=$((kTimeoutS + kStartupSlackS))
if ! timeout -s KILL $bound tail --pid=$job -f /dev/null; then
  kill -CONT "$r1" 2>/dev/null
  tail -n 20 "$WORK/startup.log"
  fatal "job still running ${bound} s after rank 1 was stopped during start-up"
fi
rc=0
wait "$job" || rc=$?
elapsed=$(python3 -c "import time; print(f'{time.time() - $t_stop:.1f}')")
echo "job exit $rc, ended ${elapsed} s after SIGSTOP of rank 1 during start-up (bound ${bound} s)"
((rc != 0)) || fatal "the job exited 0"
grep -Eq "^rank 0 \(.*\): error: MPI start-up .* on rank 0 .*did not finish within $kTimeoutS s" "$WORK/startup.log" ||
  { cat "$WORK/startup.log"; fatal "no one-line error naming rank 0, the start-up operation and the timeout"; }
grep -E "^rank 0 \(" "$WORK/startup.log"
left=$({ pgrep -f "$mine" || true; } | wc -l)
((left == 0)) || fatal "$left xtrain_mpi processes left"
xt_finish
