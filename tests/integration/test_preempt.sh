#!/usr/bin/env bash
# Preemption: SIGTERM to ONE rank of a 2-rank run mid-training makes every rank
# stop after the same step (the stop flag rides on the step's loss all-reduce); rank 0 writes --ckpt;
# every rank exits 3 within a few seconds with one "stopped" line. Resuming from that checkpoint ends
# bitwise where an uninterrupted run ends. The resumed run's checkpoint write removes a temporary file
# left by a dead writer. Then SIGUSR1 to mpirun (forwarded to every rank, as Slurm's --signal does)
# without --ckpt: exit 3 and "nothing saved". Then SIGINT to mpirun itself (Ctrl-C): mpirun's SIGCONT
# starts the stop, the checkpoint is written before mpirun's SIGKILL and xtrain's stopped line is the
# last; it resumes. Last, SIGUSR1 before training starts (xtrain_mpi and xtrain_threads): exit 3 and
# one line, not death by the signal; a stop while a run starts gets rank 0's stop line at once.
source "$(dirname "$0")/common.sh"
xt_data
kBoundS=20  # signal to exit of every rank; seen: ~2 s (one step, a checkpoint, MPI teardown)
ARGS=("${DATA[@]}" "${TINY[@]}" --steps 200 --dropout 0.1)

# start_job NAME args...: 2 ranks in the background, each rank's exit code in $WORK/NAME.rc.RANK
start_job() {
  local name=$1
  shift
  # The wrapper passes SIGTERM/SIGUSR1 that mpirun forwards on to xtrain_mpi and records its exit code.
  local wrap='trap "kill -TERM \$c" TERM; trap "kill -USR1 \$c" USR1; "$0" "$@" & c=$!
    while kill -0 $c 2>/dev/null; do wait $c; done; wait $c; rc=$?
    echo $rc > "'"$WORK/$name"'.rc.$OMPI_COMM_WORLD_RANK"; exit $rc'
  "${MPIRUN[@]}" -np 2 bash -c "$wrap" "$XT" "${ARGS[@]}" "$@" --metrics "$WORK/$name.jsonl" > "$WORK/$name.log" 2>&1 &
  job=$!
}
# wait_training NAME: until the run has recorded 3 steps (fails after 60 s or if it ended)
wait_training() {
  local t0=$SECONDS
  until [[ -f "$WORK/$1.jsonl" ]] && (($(grep -c '"train"' "$WORK/$1.jsonl") >= 3)); do
    kill -0 "$job" 2>/dev/null || { cat "$WORK/$1.log"; fatal "$1 ended before the signal"; }
    ((SECONDS - t0 < 60)) || { cat "$WORK/$1.log"; fatal "$1 did not train within 60 s"; }
    sleep 0.1
  done
}
# finish NAME: wait for the job (bounded), check every rank's exit code is 3 and the one stopped line
finish() {
  local t0=$(date +%s.%N) rc=0
  timeout -s KILL $kBoundS tail --pid=$job -f /dev/null || fatal "$1 still running ${kBoundS} s after the signal"
  wait $job || rc=$?
  local took
  took=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  for r in 0 1; do
    [[ "$(cat "$WORK/$1.rc.$r" 2>/dev/null)" == 3 ]] || { cat "$WORK/$1.log"; fatal "$1 rank $r exit $(cat "$WORK/$1.rc.$r" 2>/dev/null), want 3"; }
  done
  ((rc == 3)) || fatal "$1 mpirun exit $rc, want 3"
  (($(grep -c '^stopped |' "$WORK/$1.log") == 1)) || { cat "$WORK/$1.log"; fatal "$1 no single 'stopped' line"; }
  echo "$1: every rank exit 3, ${took} s after the signal: $(grep '^stopped |' "$WORK/$1.log")"
}

# 1. SIGTERM to rank 1 only, with --ckpt
start_job term --ckpt "$WORK/term.ckpt"
wait_training term
kill -TERM "$(rank_pid "$WORK/term.jsonl" 1)"
finish term
grep -Eq "^stopped \| by a signal on another rank after step [0-9]+: checkpoint $WORK/term.ckpt written; resume with: the same command and --resume $WORK/term.ckpt \(exit 3\)$" "$WORK/term.log" \
  || fatal "the stopped line does not name the checkpoint"
k=$(sed -nE 's/^stopped \| .* after step ([0-9]+):.*/\1/p' "$WORK/term.log")
steps=$(python3 -c "import json; print(sorted({r['step'] for r in map(json.loads, open('$WORK/term.jsonl')) if r['type'] == 'train'}))")
[[ "$steps" == "$(python3 -c "print(list(range(1, $k + 1)))")" ]] || fatal "steps recorded $steps, stopped after $k"

# 2. resume to step k+4; compare with an uninterrupted run to step k+4 (the schedule spans 200 in both)
dead=$(bash -c 'echo $$')  # a pid that has exited
debris="$WORK/term.ckpt.tmp.$(hostname).$dead.0123456789abcdef"
head -c 100000 /dev/zero > "$debris"
"${MPIRUN[@]}" -np 2 "$XT" "${ARGS[@]}" --resume "$WORK/term.ckpt" --ckpt "$WORK/term.ckpt" --stop-after 4 > "$WORK/resume.log" 2>&1 \
  || { cat "$WORK/resume.log"; fatal "resume"; }
"${MPIRUN[@]}" -np 2 "$XT" "${ARGS[@]}" --ckpt "$WORK/straight.ckpt" --stop-after $((k + 4)) > "$WORK/straight.log" 2>&1 \
  || { cat "$WORK/straight.log"; fatal "straight run"; }
cmp "$WORK/straight.ckpt" "$WORK/term.ckpt" || fatal "stopped at $k + resumed 4 steps differs from $((k + 4)) steps straight"
echo "stopped at step $k, resumed to step $((k + 4)): checkpoint byte-identical to the uninterrupted run"
[[ ! -e "$debris" ]] || fatal "the dead writer's temporary file was not removed"
echo "the temporary file of a dead writer (pid $dead) was removed by the next checkpoint write"

# 3. SIGUSR1 to mpirun (forwarded to every rank), no --ckpt: exit 3, nothing saved
start_job usr1
wait_training usr1
kill -USR1 "$job"
finish usr1
grep -Eq "^stopped \| by SIGUSR1 after step [0-9]+: nothing saved \(no --ckpt\)" "$WORK/usr1.log" \
  || fatal "no 'nothing saved' line"

# 4. SIGINT to mpirun itself (Ctrl-C): Open MPI 4.1 sends every rank SIGCONT at once, SIGTERM after
# odls_base_sigkill_timeout and SIGKILL as long again; xtrain stops on the SIGCONT. The timeout of 3 s
# (default 1 s) makes the step + checkpoint fit on a busy 2-core machine; what is measured is the path.
"${MPIRUN[@]}" -q --mca odls_base_sigkill_timeout 3 -np 2 "$XT" "${ARGS[@]}" --ckpt "$WORK/int.ckpt" \
  --metrics "$WORK/int.jsonl" > "$WORK/int.log" 2>&1 &
job=$!
wait_training int
kill -INT "$job"
rc=0
timeout -s KILL $kBoundS tail --pid=$job -f /dev/null || fatal "int still running ${kBoundS} s after SIGINT"
wait $job || rc=$?
last=$(tail -n 1 "$WORK/int.log")
[[ "$last" =~ ^stopped\ \|\ by\ mpirun\ ending\ the\ job\ \(Ctrl-C\ or\ SIGTERM\ to\ mpirun\)\ after\ step\ [0-9]+:\ checkpoint\ $WORK/int.ckpt\ written\;\ resume\ with:\ the\ same\ command\ and\ --resume\ $WORK/int.ckpt ]] \
  || { cat "$WORK/int.log"; fatal "the last line after Ctrl-C to mpirun is not xtrain's stopped line"; }
grep -Eq "^stop   \| mpirun ending the job .* during step [0-9]+: the run ends after it .*and writes $WORK/int.ckpt" "$WORK/int.log" \
  || { cat "$WORK/int.log"; fatal "no stop notice when the signal came"; }
# the shell sees mpirun's status, not the ranks' 3: the stopped line says which it is
[[ $rc -eq 1 && "$last" == *"(the ranks exit 3; the shell sees mpirun's own status, 1 after Ctrl-C or SIGTERM to mpirun)" ]] \
  || fatal "Ctrl-C to mpirun: exit $rc, and the stopped line gives another: $last"
"${MPIRUN[@]}" -np 2 "$XT" "${ARGS[@]}" --resume "$WORK/int.ckpt" --ckpt "$WORK/int.ckpt" --stop-after 1 > "$WORK/int_resume.log" 2>&1 \
  || { cat "$WORK/int_resume.log"; fatal "the checkpoint of a Ctrl-C stop does not resume"; }
echo "Ctrl-C to mpirun (exit $rc): $last; it resumes"

# 5. SIGUSR1 before training starts (while every rank tokenizes): exit 3 and one line, never death by
# the signal (138). The signal is sent once every rank has its handler (SigCgt), before any step.
caught() {  # caught PID: SIGUSR1 (10, bit 9) is in the process's caught-signal mask
  local m
  m=$(sed -n 's/^SigCgt:\s*//p' "/proc/$1/status" 2>/dev/null) || return 1
  [[ -n "$m" ]] && (((16#$m >> 9) & 1))
}
early() {  # early NAME PROGRAM N CMD...: run CMD, SIGUSR1 to its N PROGRAM processes once they all catch it
  local name=$1 prog=$2 n=$3 t0=$SECONDS
  shift 3
  "$@" --no-cache --metrics "$WORK/$name.jsonl" > "$WORK/$name.log" 2>&1 &
  job=$!
  local pids=()
  until ((${#pids[@]} == n)); do
    pids=()
    for p in $(pgrep -f "$WORK/$name.jsonl"); do
      [[ "$(cat /proc/$p/comm 2>/dev/null)" == "$prog" ]] && caught "$p" && pids+=("$p")
    done
    ((SECONDS - t0 < 60)) || { cat "$WORK/$name.log"; fatal "$name: no handler within 60 s"; }
  done
  kill -USR1 "${pids[@]}"
  rc=0
  timeout -s KILL $kBoundS tail --pid=$job -f /dev/null || fatal "$name still running"
  wait $job || rc=$?
  ((rc == 3)) || { cat "$WORK/$name.log"; fatal "$name: exit $rc for SIGUSR1 before training, want 3"; }
  [[ "$(tail -n 1 "$WORK/$name.log")" == "stopped | by SIGUSR1 before training started: nothing saved (exit 3)" ]] \
    || { cat "$WORK/$name.log"; fatal "$name: no stopped line last"; }
  ! grep -q '^step ' "$WORK/$name.log" || fatal "$name trained"
  echo "$name: SIGUSR1 before training: exit 3, $(tail -n 1 "$WORK/$name.log")"
}
early early_mpi xtrain_mpi 2 "${MPIRUN[@]}" -q -np 2 "$XT" "${ARGS[@]}"
early early_threads xtrain_threads 1 "$XT_THREADS" --ranks 2 "${ARGS[@]}"

# 6. A stop signal while the run starts (here: while a second --data file is tokenized, seconds after the
# first file's line) gets rank 0's "stop   |" line at once, as a step does: mpirun's Ctrl-C may kill the
# ranks before they meet again, and the line is then all the user sees.
for _ in 1 2 3 4 5 6 7 8 9 10 11 12; do cat "$WORK/corpus.txt"; done > "$WORK/big.txt"
"${MPIRUN[@]}" -q -np 1 "$XT" --data "$WORK/corpus.txt,$WORK/big.txt" "${TOK[@]}" "${TINY[@]}" --no-cache --steps 5 \
  > "$WORK/start.log" 2>&1 &
job=$!
t0=$SECONDS
until grep -q "^tokenize .*corpus.txt" "$WORK/start.log"; do
  ((SECONDS - t0 < 60)) && kill -0 $job 2>/dev/null || { cat "$WORK/start.log"; fatal "no tokenize line"; }
  sleep 0.05
done
kill -USR1 "$job"
rc=0
wait $job || rc=$?
grep -q "^stop   | SIGUSR1 before training started: the job ends at the ranks' next meeting and saves nothing$" "$WORK/start.log" \
  && ((rc == 3)) || { cat "$WORK/start.log"; fatal "a stop while starting: exit $rc, no stop line at once"; }
echo "a stop while starting: exit 3, $(grep '^stop   |' "$WORK/start.log")"
xt_finish
