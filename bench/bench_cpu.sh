#!/usr/bin/env bash
# CPU backend throughput of the real binary (OpenBLAS, one BLAS thread per rank, MPI collectives): for
# each world size, runs
#   mpirun -np W build/xtrain_mpi --device cpu <workload> --steps S --val-every 0 --metrics F
# and prints one JSON object per run: steady-state global tok/s and step ms (steps after the first
# WARMUP, from the metrics file), the scaling against world 1 and the command. The workload is the
# built-in default model (C=128, L=4, NH=4, T=128, 16 sequences per step; the README's first command)
# unless ARGS says otherwise. Speed belongs here, not in the tests.
# Usage: bench/bench_cpu.sh     (env: BIN=build DATA=data STEPS=20 WARMUP=3 WORLDS="1 2" ARGS="..."
#                                 LOGDIR=<tmp>)
set -euo pipefail

: "${BIN:=build}" "${STEPS:=20}" "${WARMUP:=3}"
source "$(dirname "$0")/common.sh"
WORLDS=${WORLDS:-"1 2"}
ARGS=${ARGS:-""}
xt_logdir
echo "# bench_cpu.sh on $(hostname): $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"

base=""
for w in $WORLDS; do
  log="$LOGDIR/w$w.log" metrics="$LOGDIR/w$w.jsonl"
  cmd="mpirun --allow-run-as-root --oversubscribe -np $w $BIN/xtrain_mpi --device cpu $ARGS ${XT_DATA_ARGS[*]}
       --val-every 0 --steps $STEPS --log-every 10 --metrics $metrics"
  cmd=$(echo $cmd)  # one line
  # shellcheck disable=SC2086  # the command is one line of words, as recorded
  if ! xt_train "$log" "$metrics" $cmd; then
    echo "{\"world\": $w, \"error\": \"run failed, see $log\"}"
    continue
  fi
  out=$("$PY" - "$w" "$log" "$metrics" "$WARMUP" "$cmd" "$base" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["XT_BENCH_DIR"])
from steady import steady
w, log, metrics, warmup, cmd, base = sys.argv[1:7]
s = steady(metrics, int(warmup))
rec = {"world": int(w), "tok_per_s": round(s["tok_per_s"]), "step_ms": round(s["step_ms"], 2),
       "timed_steps": s["timed_steps"], "model": open(log).read().split("model  | ")[1].split("\n")[0],
       "command": cmd}
if base:
    rec["speedup_vs_world1"] = round(s["tok_per_s"] / float(base), 3)
print(json.dumps(rec))
PY
)
  echo "$out"
  [[ -z "$base" && "$w" == 1 ]] && base=$("$PY" -c "import json,sys; print(json.loads(sys.argv[1])['tok_per_s'])" "$out")
done
