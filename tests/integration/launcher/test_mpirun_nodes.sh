#!/usr/bin/env bash
# Launcher test (a): mpirun --hostfile across 2 namespace nodes, 4 ranks (slots=2 each), with the
# default by-slot mapping and with --map-by node. Checks the placement table rank 0 prints (hosts
# are the node names; local ranks 0,1 on each node come from the shared-memory split, whatever the
# mapping) and gates 1 and 2 against a world=1 run.
source "$(dirname "$0")/common.sh"
launcher_init nodes
nodes_up 2 || fail "could not create namespace nodes"
on_exit nodes_down
printf '%s slots=2\n' "${XT_NODES[@]}" >"$XT_TMP/hostfile"
run_reference 20

# run_nodes NAME [mpirun options]: 4 ranks over the hostfile; the daemons start through rsh_agent.sh.
run_nodes() {
  local name="$1" t0=$SECONDS
  shift
  xt_mpirun -np 4 --hostfile "$XT_TMP/hostfile" --mca plm_rsh_agent "$XT_LAUNCHER_DIR/rsh_agent.sh" \
    "${XT_MCA_NET[@]}" "$@" "$XT_BIN" "${XT_ARGS[@]}" --steps 20 --metrics "$XT_TMP/$name.jsonl" \
    >"$XT_TMP/$name.log" 2>&1 || { cat "$XT_TMP/$name.log"; fail "mpirun ($name) failed"; }
  say "mpirun $name: $((SECONDS - t0)) s"
}

run_nodes byslot
check_placement "$XT_TMP/byslot.log" "0 xtn0 0" "1 xtn0 1" "2 xtn1 0" "3 xtn1 1"
check_gates "$XT_TMP/ref.jsonl" "$XT_TMP/byslot.jsonl" "mpirun hostfile, by slot"

# --map-by node: ranks alternate nodes, so rank % 2 would be a wrong local rank on xtn0's rank 2.
run_nodes bynode --map-by node
check_placement "$XT_TMP/bynode.log" "0 xtn0 0" "1 xtn1 0" "2 xtn0 1" "3 xtn1 1"
check_gates "$XT_TMP/ref.jsonl" "$XT_TMP/bynode.jsonl" "mpirun hostfile, --map-by node"
no_xtrain_left
echo "PASS"
