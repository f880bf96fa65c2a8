# shellcheck shell=bash
# common.sh — sourced by every launcher test: skip rules (exit 77), the launcher lock, cleanup on
# exit, the tiny training config, the world=1 reference run, gate and placement checks.
# Each test: source common.sh; launcher_init [needs...]; then nodes_up / slurm_up as needed.
set -u -o pipefail

XT_LAUNCHER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
XT_REPO="$(cd "$XT_LAUNCHER_DIR/../../.." && pwd)"
XT_LOCK=/run/lock/xtrain-launcher.lock
XT_LAST=/run/lock/xtrain-launcher.last  # temp dir of the run holding the lock (for stale cleanup)
# One rank of the tiny config must keep a collective waiting this long at most once a peer is gone.
XT_KILL_BOUND_S=30
source "$XT_LAUNCHER_DIR/nodes.sh"

say() { printf '[%s] %s\n' "$(date +%T)" "$*"; }
skip() { printf 'SKIP: %s\n' "$*"; exit 77; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

# ---- cleanup: handlers run in reverse order on any exit, including failures and signals
XT_CLEANUP=()
on_exit() { XT_CLEANUP+=("$*"); }
run_cleanup() {
  local rc=$? i
  trap - EXIT INT TERM
  for ((i = ${#XT_CLEANUP[@]} - 1; i >= 0; i--)); do eval "${XT_CLEANUP[i]}" || true; done
  exit "$rc"
}
trap run_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# launcher_init [nodes] [slurm]: skip unless everything the test needs is here, then take the lock
# (one launcher test at a time: they share the fixed namespace names, bridge and 10.77.0.0/24) and
# make the temp dir $XT_TMP. Sets XT_BIN and the tiny config in XT_ARGS.
launcher_init() {
  local need c
  # data: an excerpt of data/brown.txt (scripts/setup.sh) or, failing that, ../shared/data
  local dd="${XTRAIN_DATA_DIR:-}" sd="${XTRAIN_SHARED_DATA:-}" corpus tokdir
  if [[ -r "$dd/brown.txt" && -r "$dd/gpt2/encoder.json" ]]; then corpus="$dd/brown.txt" tokdir="$dd/gpt2"
  elif [[ -r "$sd/tinyshakespeare.txt" && -r "$sd/gpt2/encoder.json" ]]; then corpus="$sd/tinyshakespeare.txt" tokdir="$sd/gpt2"
  else skip "no data: run scripts/setup.sh (data/) or provide ../shared/data"; fi
  XT_BIN="${XTRAIN_BIN_DIR:-}/xtrain_mpi"
  [[ -x "$XT_BIN" ]] || fail "no xtrain_mpi in XTRAIN_BIN_DIR='${XTRAIN_BIN_DIR:-}'"
  command -v mpirun >/dev/null || skip "mpirun is missing"
  for need in "$@"; do
    case "$need" in
      nodes)
        [[ "$(id -u)" == 0 ]] || skip "namespace nodes need root"
        for c in ip nsenter unshare flock; do command -v "$c" >/dev/null || skip "$c is missing"; done ;;
      slurm)
        for c in slurmctld slurmd srun sbatch salloc sinfo scontrol; do
          command -v "$c" >/dev/null || skip "$c is missing (scripts/setup.sh installs Slurm)"
        done ;;
    esac
  done
  if [[ " $* " == *" nodes "* ]]; then
    exec 9>"$XT_LOCK"
    say "waiting for the launcher lock $XT_LOCK"
    flock -w 900 9 || fail "launcher lock $XT_LOCK still held after 900 s"
    stale_cleanup
  fi
  XT_TMP="$(mktemp -d /tmp/xtrain-launcher.XXXXXX)"
  chmod 755 "$XT_TMP"
  [[ " $* " == *" nodes "* ]] && echo "$XT_TMP" >"$XT_LAST"
  on_exit '[[ -n "${XT_KEEP:-}" ]] && echo "kept $XT_TMP" || rm -rf "$XT_TMP"'
  head -c 300000 "$corpus" >"$XT_TMP/corpus.txt"
  XT_ARGS=(--data "$XT_TMP/corpus.txt" --encoder-json "$tokdir/encoder.json" --vocab-bpe "$tokdir/vocab.bpe"
           --tokens-cache "$XT_TMP/x.tokcache" --dim 32 --heads 2 --layers 1 --seq 16 --batch 8 --val-every 0
           --device cpu)
}

# stale_cleanup: what a run killed by a ctest timeout (no EXIT trap) left: its slurmctld and temp dir.
# Namespaces and the bridge are removed by nodes_up. Runs only under the lock.
stale_cleanup() {
  local old pid
  old="$(cat "$XT_LAST" 2>/dev/null)" || return 0
  [[ "$old" == /tmp/xtrain-launcher.* && -d "$old" ]] || return 0
  pid="$(cat "$old/slurm/slurmctld.pid" 2>/dev/null)"
  if [[ -n "$pid" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$old/"; then
    say "killing slurmctld $pid left by an earlier run"
    kill -9 "$pid"
  fi
  rm -rf "$old"
}

# pid_alive PID: true while PID exists and is not a zombie (daemons here are re-parented to PID 1
# and may linger as zombies, so kill -0 is not enough).
pid_alive() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"
  [[ "${stat%% *}" != Z ]]
}

# xt_mpirun ARGS...: mpirun with the options every test needs (root; mpirun accepts duplicates of
# options from the environment).
xt_mpirun() { mpirun --allow-run-as-root "$@"; }

# MPI over the namespace bridge only (btl_tcp and the runtime's out-of-band channel).
XT_MCA_NET=(--mca btl self,tcp --mca btl_tcp_if_include "$XT_SUBNET" --mca oob_tcp_if_include "$XT_SUBNET")

# run_reference STEPS: the world=1 run every multi-rank run is compared with -> $XT_TMP/ref.jsonl.
# Also writes the token cache the later runs reuse.
run_reference() {
  local t0=$SECONDS
  "$XT_BIN" "${XT_ARGS[@]}" --steps "$1" --metrics "$XT_TMP/ref.jsonl" >"$XT_TMP/ref.log" 2>&1 ||
    { cat "$XT_TMP/ref.log"; fail "world=1 reference run failed"; }
  say "world=1 reference: $((SECONDS - t0)) s, $(tail -n1 "$XT_TMP/ref.log")"
}

# check_gates REF OTHER LABEL: gate 1 (per-step loss vs world=1) and gate 2 (final max_param_diff),
# both figures printed by tests/integration/gate_compare.py.
check_gates() {
  python3 "$XT_REPO/tests/integration/gate_compare.py" "$1" "$2" --label "$3" || fail "gates failed: $2 vs $1"
}

# placement LOG: the rank table rank 0 printed, one "rank host local_rank" line per rank.
placement() {
  awk '/^rank +host +local_rank +device/ {on = 1; next}
       on && $1 ~ /^[0-9]+$/ && NF >= 4 {print $1, $2, $3; next}
       on {exit}' "$1"
}

# check_placement LOG "0 xtn0 0" "1 xtn0 1" ...: the table must be exactly these rows.
check_placement() {
  local log="$1" got want
  shift
  got="$(placement "$log")"
  want="$(printf '%s\n' "$@")"
  printf 'placement:\n%s\n' "$got"
  [[ "$got" == "$want" ]] || fail "placement in $log differs; want:"$'\n'"$want"
}

# no_xtrain_left: fail when an xtrain_mpi process still runs in one of our nodes.
no_xtrain_left() {
  local node pids
  for node in "${XT_NODES[@]}"; do
    pids="$(node_pids "$node" xtrain_mpi)"
    [[ -z "$pids" ]] || fail "xtrain_mpi still running on $node: pids $pids"
  done
}
