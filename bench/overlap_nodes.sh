#!/usr/bin/env bash
# The overlapped gradient all-reduce across 2 namespace "nodes" of one machine, swept over
# the link rate (tc tbf on both ends of each node's link; this kernel has no netem, so bandwidth only,
# no added delay). As root, from the repository root, after a CPU build:
#   XTRAIN_BIN_DIR=build XTRAIN_DATA_DIR=data bench/overlap_nodes.sh [RATE...]
# RATE: none (no qdisc) or N followed by mbit; default: none 2000mbit 1000mbit 500mbit 200mbit 100mbit.
# Environment: REPEATS (2) rounds over all rates, STEPS (3) steps per run of which step 1 is warm-up,
# BUCKET_MB (1), KEEP_DIR (copy every log, metrics file and runs.tsv there).
# Model: C=128, L=16, T=64, global batch 8: P = 9.6M, S = 38 MB of fp32 gradients, the embeddings
# (final only at the end of backward) two thirds of it, 16 layers of 0.8 MB each after them.
# Per round and rate: the link goodput (one 16 MiB TCP transfer between the nodes, first round only),
# alpha (bench/mpi_pingpong.c between the nodes), then at 2 ranks (one per node) and 4 (two per node)
# one run with --bucket-mb 0 and one with BUCKET_MB, their order alternating. At the start and end of
# each round and per world the compute time t_c: the same ranks on ONE node over shared memory,
# --bucket-mb 0 (the all-reduce there is ~1% of a step). Every run records the 1-minute load average at its start. Prints a markdown table:
# medians of the steps after warm-up over all rounds, measured exposed communication (step - t_c) and
# bench/cost_model.py's prediction with B = the tbf rate (measured goodput for "none"), alpha measured,
# t_b = 2/3 t_c. Uses the launcher tests' namespaces and lock (tests/integration/launcher/nodes.sh).
source "$(dirname "$0")/common.sh" && xt_help "$@"  # -h/--help: the header comment above
source "$(dirname "$0")/../tests/integration/launcher/common.sh"
RATES=("$@")
((${#RATES[@]})) || RATES=(none 2000mbit 1000mbit 500mbit 200mbit 100mbit)
for r in "${RATES[@]}"; do [[ "$r" == none || "$r" =~ ^[1-9][0-9]*mbit$ ]] || fail "bad rate '$r' (none or e.g. 200mbit)"; done
REPEATS=${REPEATS:-2} STEPS=${STEPS:-3} BUCKET_MB=${BUCKET_MB:-1}
((STEPS >= 2 && REPEATS >= 1)) || fail "STEPS must be >= 2 and REPEATS >= 1"
command -v mpicc >/dev/null || fail "mpicc is missing (libopenmpi-dev)"
launcher_init nodes
nodes_up 2 || fail "could not create namespace nodes"
on_exit nodes_down
[[ -n "${KEEP_DIR:-}" ]] && on_exit 'mkdir -p "$KEEP_DIR" && cp "$XT_TMP"/*.log "$XT_TMP"/*.jsonl "$XT_TMP/runs.tsv" "$KEEP_DIR"/'
printf '%s slots=2\n' "${XT_NODES[@]}" >"$XT_TMP/hostfile"
printf '%s slots=4\n' "${XT_NODES[0]}" >"$XT_TMP/hostfile1"
mpicc -O2 -o "$XT_TMP/mpi_pingpong" "$XT_REPO/bench/mpi_pingpong.c" || fail "mpicc bench/mpi_pingpong.c"
MODEL=(--dim 128 --heads 4 --layers 16 --seq 64 --batch 8 --val-every 0 --log-every 1 --steps "$STEPS" --device cpu)
"$XT_BIN" "${XT_ARGS[@]}" "${MODEL[@]}" --steps 1 >"$XT_TMP/cache.log" 2>&1 || { cat "$XT_TMP/cache.log"; fail "cache run"; }
# --bind-to none: with 2 ranks Open MPI binds each rank to core 0 of its "node", and both nodes are
# this machine, so both ranks would share one core.
NODES_MPI=(--hostfile "$XT_TMP/hostfile" --mca plm_rsh_agent "$XT_LAUNCHER_DIR/rsh_agent.sh" --bind-to none
           --oversubscribe "${XT_MCA_NET[@]}")
# shellcheck disable=SC2054  # self,vader is one MCA value, not two array elements
ONE_NODE_MPI=(--hostfile "$XT_TMP/hostfile1" --mca plm_rsh_agent "$XT_LAUNCHER_DIR/rsh_agent.sh" --bind-to none
              --mca btl self,vader --mca oob_tcp_if_include "$XT_SUBNET")

set_rate() {  # set_rate RATE: both directions (the node's eth0 and the host end of its veth)
  local i mbit burst
  for i in 0 1; do
    if [[ "$1" == none ]]; then
      node_exec "${XT_NODES[i]}" tc qdisc del dev eth0 root 2>/dev/null
      tc qdisc del dev "xtv$i" root 2>/dev/null
    else  # burst: at least 2 ms at the rate (tbf needs burst >= rate / HZ), at least 256 KiB
      mbit=${1%mbit} burst=$((mbit * 250 > 262144 ? mbit * 250 : 262144))
      node_exec "${XT_NODES[i]}" tc qdisc replace dev eth0 root tbf rate "$1" burst "$burst" latency 100ms &&
        tc qdisc replace dev "xtv$i" root tbf rate "$1" burst "$burst" latency 100ms || fail "tc tbf $1"
    fi
  done
  return 0
}

goodput() {  # goodput RATE: Mbit/s of one 16 MiB TCP transfer node0 -> node1, timed by the receiver
  local port=5301 out
  node_exec "${XT_NODES[1]}" python3 -c '
import socket, sys, time
s = socket.create_server(("0.0.0.0", int(sys.argv[1]))); c, _ = s.accept(); n = 0; t0 = None
while (d := c.recv(1 << 20)):
    t0 = t0 or time.perf_counter(); n += len(d)
print(f"{n * 8 / (time.perf_counter() - t0) / 1e6:.0f}")' "$port" >"$XT_TMP/goodput.out" &
  local rx=$!
  sleep 0.5
  node_exec "${XT_NODES[0]}" python3 -c '
import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2]))).sendall(bytes(16 << 20))' "$(node_addr 1)" "$port" ||
    fail "goodput transfer at $1"
  wait "$rx" || fail "goodput receiver at $1"
  out="$(cat "$XT_TMP/goodput.out")"
  printf 'goodput\t%s\t%s\n' "$1" "$out" >>"$XT_TMP/runs.tsv"
  say "$1: goodput $out Mbit/s"
}

alpha() {  # alpha RATE: one-way small-message latency between the nodes
  local out
  out="$(xt_mpirun -np 2 --map-by node "${NODES_MPI[@]}" "$XT_TMP/mpi_pingpong" 2000)" || fail "mpi_pingpong at $1"
  printf 'alpha\t%s\t%s\n' "$1" "${out#alpha_us }" >>"$XT_TMP/runs.tsv"
}

run() {  # run ROUND RATE NP BUCKET_MB nodes|one: one training run -> a line of runs.tsv
  local rnd=$1 rate=$2 np=$3 mb=$4 where=$5 load name opts
  name="r${rnd}_${rate}_w${np}_b${mb}_$where"
  if [[ "$where" == one ]]; then opts=("${ONE_NODE_MPI[@]}")
  else opts=("${NODES_MPI[@]}"); ((np == 2)) && opts+=(--map-by node); fi
  load="$(cut -d' ' -f1 /proc/loadavg)"
  xt_mpirun -np "$np" "${opts[@]}" "$XT_BIN" "${XT_ARGS[@]}" "${MODEL[@]}" --bucket-mb "$mb" \
    --metrics "$XT_TMP/$name.jsonl" >"$XT_TMP/$name.log" 2>&1 || { cat "$XT_TMP/$name.log"; fail "run $name"; }
  printf 'run\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rate" "$np" "$mb" "$where" "$rnd" "$load" "$name" >>"$XT_TMP/runs.tsv"
  say "$name (load $load): $(grep -m1 '^gradient all-reduce' "$XT_TMP/$name.log")"
}

: >"$XT_TMP/runs.tsv"
t0=$SECONDS
for ((rnd = 1; rnd <= REPEATS; rnd++)); do
  set_rate none
  for np in 2 4; do run "$rnd" none "$np" 0 one; done
  order=("${RATES[@]}")  # even rounds go through the rates backwards, so drift in load is not a rate effect
  ((rnd % 2 == 0)) && for ((i = 0; i < ${#RATES[@]}; i++)); do order[i]=${RATES[${#RATES[@]} - 1 - i]}; done
  k=0
  for rate in "${order[@]}"; do
    set_rate "$rate"
    ((rnd == 1)) && goodput "$rate"
    alpha "$rate"
    for np in 2 4; do
      if (((k++ + rnd) % 2)); then run "$rnd" "$rate" "$np" "$BUCKET_MB" nodes; run "$rnd" "$rate" "$np" 0 nodes
      else run "$rnd" "$rate" "$np" 0 nodes; run "$rnd" "$rate" "$np" "$BUCKET_MB" nodes; fi
    done
  done
  set_rate none
  for np in 2 4; do run "$rnd" none "$np" 0 one; done
done
say "sweep took $((SECONDS - t0)) s; load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$XT_REPO/bench/overlap_nodes_table.py" "$XT_TMP" "$BUCKET_MB" "${RATES[@]}"
