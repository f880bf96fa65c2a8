#!/usr/bin/env bash
# Launcher test (d): a process started without a launcher while the environment claims one started
# 4 tasks (srun without --mpi=pmix, an xtrain built against another MPI...) sees an MPI world of 1.
# It must refuse to train alone: exit 1 with a message naming the mismatch ("world of 1").
source "$(dirname "$0")/common.sh"
launcher_init

# mismatch VAR: run xtrain_mpi directly (MPI singleton) with VAR=4; expect exit 1 and the message.
mismatch() {
  local var="$1" rc=0 log="$XT_TMP/$1.log"
  env "$var=4" "$XT_BIN" "${XT_ARGS[@]}" --steps 20 >"$log" 2>&1 || rc=$?
  cat "$log"
  [[ $rc == 1 ]] || fail "$var=4 without a launcher: exit $rc, want 1"
  grep -q "world of 1" "$log" || fail "$var=4 without a launcher: no 'world of 1' in the message"
  ! grep -q '^step' "$log" || fail "$var=4 without a launcher: it trained"
  say "$var=4 without a launcher: exit 1, message ok"
}
mismatch SLURM_STEP_NUM_TASKS
mismatch OMPI_COMM_WORLD_SIZE
echo "PASS"
