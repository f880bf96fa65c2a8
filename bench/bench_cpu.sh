#!/usr/bin/env bash
# CPU backend throughput of the real binary (OpenBLAS, one BLAS thread per rank, MPI collectives): for
# each world size, runs
#   mpirun -np W build/xtrain_mpi --device cpu <workload> --steps S --val-every 0 --metrics F
# and prints one JSON object per run: steady-state global tok/s and step ms (steps after the first
# WARMUP, from the metrics file), the scaling against world 1, the whole run's wall seconds and CPU
# seconds (user + sys of mpirun and every rank, start-up included: on cores shared with other work the
# figure that wall time hides) and the command. The workload is the
# built-in default model (C=128, L=4, NH=4, T=128, 16 sequences per step; the README's first command)
# unless ARGS says otherwise. Speed belongs here, not in the tests. A run that fails prints
# {"world", "error": xtrain's error line, "log"} instead; the exit status is 0 when every run
# succeeded, 1 when any failed, 2 for a bad WORLDS. One rank's step split into its GEMMs (timed alone) and
# its other ops: build/bench_cpu_ops (bench/bench_cpu_ops.cpp).
# Usage: bench/bench_cpu.sh     (env: BIN=build DATA=data STEPS=20 WARMUP=3 WORLDS="1 2" (positive
#                                 integers) ARGS="..." LOGDIR=<tmp>)
set -euo pipefail

: "${BIN:=build}" "${STEPS:=20}" "${WARMUP:=3}"
source "$(dirname "$0")/common.sh"
xt_help "$@"  # -h/--help: the header comment above
WORLDS=${WORLDS:-"1 2"}
ARGS=${ARGS:-""}
read -ra worlds <<< "$WORLDS"
read -ra args <<< "$ARGS"  # options, split at spaces as on a command line
((${#worlds[@]} > 0)) || { echo "bench_cpu.sh: WORLDS is empty" >&2; exit 2; }
for w in "${worlds[@]}"; do
  [[ $w =~ ^[1-9][0-9]{0,5}$ ]] || { echo "bench_cpu.sh: WORLDS must be positive integers (got '$w')" >&2; exit 2; }
done
xt_logdir
TIMEFORMAT='%R %U %S'  # bash's `time`: wall, user and sys seconds of the command and its children
echo "# bench_cpu.sh on $(hostname): $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"

# record W LOG METRICS WARMUP CMD BASE TIMES: the JSON line of a finished run (BASE: world 1's tok/s, or "";
# TIMES: the file of `time`'s "wall user sys")
record() {
  "$PY" - "$@" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["XT_BENCH_DIR"])
from steady import steady
w, log, metrics, warmup, cmd, base, times = sys.argv[1:8]
s = steady(metrics, int(warmup))
wall, user, system = (float(x) for x in open(times).read().split()[-3:])
rec = {"world": int(w), "tok_per_s": round(s["tok_per_s"]), "step_ms": round(s["step_ms"], 2),
       "timed_steps": s["timed_steps"], "model": open(log).read().split("model  | ")[1].split("\n")[0],
       "run_wall_s": round(wall, 1), "run_cpu_s": round(user + system, 1), "command": cmd}
if base:
    rec["speedup_vs_world1"] = round(s["tok_per_s"] / float(base), 3)
print(json.dumps(rec))
PY
}

base="" failed=0
for w in "${worlds[@]}"; do
  log="$LOGDIR/w$w.log" metrics="$LOGDIR/w$w.jsonl" err="$LOGDIR/w$w.err" times="$LOGDIR/w$w.time"
  cmd=(mpirun --allow-run-as-root --oversubscribe -np "$w" "$BIN/xtrain_mpi" --device cpu "${args[@]}" "${XT_DATA_ARGS[@]}"
       --val-every 0 --steps "$STEPS" --log-every 10 --metrics "$metrics")
  if ! { time xt_train "$log" "$metrics" "${cmd[@]}" 2> "$err"; } 2> "$times" \
     || ! out=$(record "$w" "$log" "$metrics" "$WARMUP" "$(xt_quote "${cmd[@]}")" "$base" "$times" 2>> "$err"); then
    failed=$((failed + 1))
    "$PY" -c 'import json, sys; print(json.dumps({"world": int(sys.argv[1]), "error": sys.argv[2], "log": sys.argv[3]}))' \
      "$w" "$(cat "$err")" "$log"
    continue
  fi
  echo "$out"
  if [[ -z "$base" && "$w" == 1 ]]; then
    base=$("$PY" -c "import json,sys; print(json.loads(sys.argv[1])['tok_per_s'])" "$out")
  fi
done
if ((failed > 0)); then
  echo "bench_cpu.sh: $failed of ${#worlds[@]} runs failed (logs in $LOGDIR)" >&2
  exit 1
fi
