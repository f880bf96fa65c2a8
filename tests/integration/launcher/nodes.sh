#!/usr/bin/env bash
# nodes.sh — fake cluster nodes on one machine: one network namespace per node, joined by a bridge.
# Node i is namespace (and hostname) ${XT_NODE_PREFIX}i with address 10.77.0.(10+i)/24; the bridge
# holds 10.77.0.1/24 (where slurmctld and mpirun listen). Only these addresses and loopback are used.
# Library (source it):  nodes_up N / nodes_down / node_exec NODE CMD... / node_pids NODE [COMM]
# Command line:         nodes.sh up N | down | list      (for poking at it by hand, as root)
# Names are fixed so that a test killed by a timeout leaves nothing behind that the next run can't find:
# nodes_up first removes leftovers. Tests call it only while holding the launcher lock (common.sh).

XT_NODE_PREFIX="${XT_NODE_PREFIX:-xtn}"
XT_BRIDGE="${XT_BRIDGE:-xtbr0}"
XT_BRIDGE_ADDR=10.77.0.1
XT_SUBNET=10.77.0.0/24
XT_NODES=()

# node_addr I: the address of node I (I = 0..N-1).
node_addr() { printf '10.77.0.%d\n' $((10 + $1)); }

# node_exec NODE CMD...: run CMD inside NODE's network namespace with NODE as hostname (own UTS ns),
# so Open MPI's per-host session and shared-memory files and Slurm's node names stay apart.
# `nsenter --net`, not `ip netns exec`: the latter remounts /sys, and slurmd then finds no cgroup fs.
node_exec() {
  local node="$1"
  shift
  nsenter --net="/run/netns/$node" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$node" "$@"
}

# node_pids NODE [COMM]: pids of processes inside NODE's network namespace (optionally only those
# whose command name is COMM). The namespace identity is its inode, so this never matches processes
# of other users of the machine.
node_pids() {
  local node="$1" comm="${2:-}" want pid ns
  want="$(stat -L -c %i "/run/netns/$node" 2>/dev/null)" || return 0
  for pid in /proc/[0-9]*; do
    pid="${pid#/proc/}"
    ns="$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null)" || continue
    [[ "$ns" == "$want" ]] || continue
    [[ -z "$comm" || "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$comm" ]] && echo "$pid"
  done
  return 0
}

# nodes_kill_all NODE: SIGKILL every process left in NODE's namespace (all were started by us).
nodes_kill_all() {
  local pids
  pids="$(node_pids "$1")"
  # shellcheck disable=SC2086  # a list of pids
  [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null
  return 0
}

# nodes_down: kill what runs in our namespaces, delete them, the veths go with them, then the bridge.
nodes_down() {
  local ns
  for ns in /run/netns/"$XT_NODE_PREFIX"*; do
    [[ -e "$ns" ]] || continue
    nodes_kill_all "${ns##*/}"
    ip netns delete "${ns##*/}" 2>/dev/null
  done
  ip link show "$XT_BRIDGE" >/dev/null 2>&1 && ip link delete "$XT_BRIDGE"
  XT_NODES=()
  return 0
}

# nodes_up N: create nodes ${XT_NODE_PREFIX}0..N-1 (after removing leftovers of an earlier run).
# Sets XT_NODES to their names.
nodes_up() {
  local n="$1" i node
  nodes_down
  ip link add "$XT_BRIDGE" type bridge || return 1
  ip addr add "$XT_BRIDGE_ADDR/24" dev "$XT_BRIDGE" && ip link set "$XT_BRIDGE" up || return 1
  for ((i = 0; i < n; i++)); do
    node="$XT_NODE_PREFIX$i"
    ip netns add "$node" || return 1
    # host end xtv<i> on the bridge, node end renamed eth0 inside the namespace
    ip link add "xtv$i" type veth peer name eth0 netns "$node" || return 1
    ip link set "xtv$i" master "$XT_BRIDGE" up || return 1
    ip -n "$node" addr add "$(node_addr "$i")/24" dev eth0 || return 1
    ip -n "$node" link set eth0 up && ip -n "$node" link set lo up || return 1
    XT_NODES+=("$node")
  done
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -u
  case "${1:-}" in
    up) nodes_up "${2:?usage: nodes.sh up N}" && printf '%s\n' "${XT_NODES[@]}" ;;
    down) nodes_down ;;
    list) ip netns list | grep "^$XT_NODE_PREFIX" || true ;;
    *) echo "usage: nodes.sh up N | down | list" >&2; exit 2 ;;
  esac
fi
