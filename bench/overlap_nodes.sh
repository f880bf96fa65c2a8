#!/usr/bin/env bash
# The overlapped gradient all-reduce (issue #13) across 2 namespace "nodes" of one machine whose links
# are slowed with tc tbf (bandwidth only: this kernel has no netem, so no added delay). As root, from
# the repository root, after a CPU build:
#   XTRAIN_BIN_DIR=build XTRAIN_DATA_DIR=data bench/overlap_nodes.sh [RATE]     (RATE default 200mbit)
# Runs 2 ranks (one per node) and 4 ranks (two per node) of a 16-layer model (C=128: P = 9.6M, S = 38 MB
# of fp32 gradients, of which the layers, the part that can overlap, are a third), --bucket-mb 0 against 1, and prints the median step time of steps 2..STEPS and
# whether the losses are bitwise equal. Uses the launcher tests' namespaces and lock
# (tests/launcher/nodes.sh), so it never runs at the same time as them.
source "$(dirname "$0")/../tests/launcher/common.sh"
RATE=${1:-200mbit}
STEPS=${STEPS:-4}
launcher_init nodes
nodes_up 2 || fail "could not create namespace nodes"
on_exit nodes_down
printf '%s slots=2\n' "${XT_NODES[@]}" >"$XT_TMP/hostfile"
for i in 0 1; do  # both directions: the node's eth0 and the host end of its veth
  nsenter --net="/run/netns/${XT_NODES[i]}" tc qdisc replace dev eth0 root tbf rate "$RATE" burst 256kb latency 100ms
  tc qdisc replace dev "xtv$i" root tbf rate "$RATE" burst 256kb latency 100ms
done
MODEL=(--dim 128 --heads 4 --layers 16 --seq 64 --batch 8 --val-every 0 --log-every 1 --steps "$STEPS" --device cpu)
"$XT_BIN" "${XT_ARGS[@]}" "${MODEL[@]}" --steps 1 >"$XT_TMP/cache.log" 2>&1 || { cat "$XT_TMP/cache.log"; fail "cache run"; }
run() {  # run NP BUCKET_MB [mpirun options]
  local np=$1 mb=$2
  shift 2
  xt_mpirun -np "$np" --hostfile "$XT_TMP/hostfile" --mca plm_rsh_agent "$XT_LAUNCHER_DIR/rsh_agent.sh" \
    "${XT_MCA_NET[@]}" "$@" "$XT_BIN" "${XT_ARGS[@]}" "${MODEL[@]}" --bucket-mb "$mb" \
    --metrics "$XT_TMP/w${np}_b$mb.jsonl" >"$XT_TMP/w${np}_b$mb.log" 2>&1 ||
    { cat "$XT_TMP/w${np}_b$mb.log"; fail "run world $np bucket $mb"; }
  grep "^gradient all-reduce" "$XT_TMP/w${np}_b$mb.log"
}
say "links limited to $RATE each way"
for np in 2 4; do
  opts=()
  ((np == 2)) && opts=(--map-by node)
  run "$np" 0 "${opts[@]}"
  run "$np" 1 "${opts[@]}"
done
python3 - "$XT_TMP" "$RATE" <<'PY'
import json, statistics, sys
d, rate = sys.argv[1], sys.argv[2]
def recs(t): return [json.loads(l) for l in open(f"{d}/{t}.jsonl") if '"train"' in l]
print(f"| ranks (over 2 nodes, {rate}) | step ms, one all-reduce | step ms, 1 MiB buckets | speed-up | losses |")
print("|---|---:|---:|---:|---|")
for np in (2, 4):
    a, b = recs(f"w{np}_b0"), recs(f"w{np}_b1")
    ma = statistics.median(r["ms"] for r in a[1:]); mb = statistics.median(r["ms"] for r in b[1:])
    same = [r["loss"] for r in a] == [r["loss"] for r in b]
    print(f"| {np} | {ma:.0f} | {mb:.0f} | {ma/mb:.2f}x | {'bitwise equal' if same else 'differ'} |")
PY
