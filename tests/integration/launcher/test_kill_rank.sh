#!/usr/bin/env bash
# Launcher test (c): SIGKILL one rank on the second node in the middle of a long run. The launcher
# must end the whole job with a non-zero exit within XT_KILL_BOUND_S, and no xtrain_mpi may be left
# on any node (no rank may wait forever in a collective for a dead peer).
#   MODE mpirun: mpirun --hostfile over the namespace nodes
#   MODE srun:   srun --mpi=pmix --kill-on-bad-exit=1 -N2 -n4 (as slurm/*.sbatch launch)
source "$(dirname "$0")/common.sh"
mode="${1:?usage: test_kill_rank.sh mpirun|srun}"
if [[ "$mode" == srun ]]; then
  source "$XT_LAUNCHER_DIR/slurm.sh"
  launcher_init nodes slurm
else
  launcher_init nodes
fi
nodes_up 2 || fail "could not create namespace nodes"
on_exit nodes_down
[[ "$mode" == srun ]] && slurm_up
printf '%s slots=2\n' "${XT_NODES[@]}" >"$XT_TMP/hostfile"
# The token cache first (world=1, a few steps), so the long run starts training at once.
"$XT_BIN" "${XT_ARGS[@]}" --steps 1 >"$XT_TMP/cache.log" 2>&1 || { cat "$XT_TMP/cache.log"; fail "warm-up run failed"; }

long=("$XT_BIN" "${XT_ARGS[@]}" --steps 1000000 --log-every 1000 --metrics "$XT_TMP/long.jsonl")
case "$mode" in
  mpirun)
    xt_mpirun -np 4 --hostfile "$XT_TMP/hostfile" --mca plm_rsh_agent "$XT_LAUNCHER_DIR/rsh_agent.sh" \
      "${XT_MCA_NET[@]}" "${long[@]}" >"$XT_TMP/long.log" 2>&1 &
    ;;
  srun) srun --mpi=pmix --kill-on-bad-exit=1 -N2 -n4 "${long[@]}" >"$XT_TMP/long.log" 2>&1 & ;;
  *) fail "unknown mode $mode" ;;
esac
launcher_pid=$!
on_exit "pid_alive $launcher_pid && kill -9 $launcher_pid"

# Wait (bounded) until the ranks train: 3 steps in the metrics file.
t0=$SECONDS
until [[ -f "$XT_TMP/long.jsonl" ]] && (($(grep -c '"train"' "$XT_TMP/long.jsonl") >= 3)); do
  pid_alive "$launcher_pid" || { cat "$XT_TMP/long.log"; fail "the run ended before the kill"; }
  ((SECONDS - t0 < 60)) || { cat "$XT_TMP/long.log"; fail "no training steps after 60 s"; }
  sleep 0.2
done
mapfile -t victims < <(node_pids xtn1 xtrain_mpi)
((${#victims[@]} == 2)) || fail "expected 2 xtrain_mpi ranks on xtn1, found ${#victims[@]}: ${victims[*]}"
say "training ($(grep -c '"train"' "$XT_TMP/long.jsonl") steps); kill -9 ${victims[0]} on xtn1"
kill -9 "${victims[0]}"
t_kill=$(date +%s.%N)

# The launcher must exit and every rank must be gone, both within the bound.
while pid_alive "$launcher_pid" || [[ -n "$(node_pids xtn0 xtrain_mpi)$(node_pids xtn1 xtrain_mpi)" ]]; do
  if (($(date +%s) - ${t_kill%.*} > XT_KILL_BOUND_S)); then
    tail -n 30 "$XT_TMP/long.log"
    fail "$mode: job still running (launcher alive: $(pid_alive "$launcher_pid" && echo yes || echo no), ranks:" \
      "$(node_pids xtn0 xtrain_mpi) $(node_pids xtn1 xtrain_mpi)) ${XT_KILL_BOUND_S} s after the kill"
  fi
  sleep 0.1
done
rc=0
wait "$launcher_pid" || rc=$?
elapsed=$(python3 -c "import time; print(f'{time.time() - $t_kill:.1f}')")
tail -n 15 "$XT_TMP/long.log"
say "$mode: launcher exit $rc, whole job gone ${elapsed} s after the kill (bound ${XT_KILL_BOUND_S} s)"
((rc != 0)) || fail "$mode: launcher exited 0 after a rank was killed"
no_xtrain_left
echo "PASS"
