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

BIN=${BIN:-build}
DATA=${DATA:-data}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-3}
WORLDS=${WORLDS:-"1 2"}
ARGS=${ARGS:-""}
LOGDIR=${LOGDIR:-$(mktemp -d)}
mkdir -p "$LOGDIR"
echo "# bench_cpu.sh on $(hostname): $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"

base=""
for w in $WORLDS; do
  log="$LOGDIR/w$w.log" metrics="$LOGDIR/w$w.jsonl"
  rm -f "$metrics"
  cmd="mpirun --allow-run-as-root --oversubscribe -np $w $BIN/xtrain_mpi --device cpu $ARGS
       --data $DATA/brown.txt --encoder-json $DATA/gpt2/encoder.json --vocab-bpe $DATA/gpt2/vocab.bpe
       --val-every 0 --steps $STEPS --log-every 10 --metrics $metrics"
  cmd=$(echo $cmd)  # one line
  if ! $cmd >"$log" 2>&1; then
    echo "{\"world\": $w, \"error\": \"run failed, see $log\"}"
    tail -5 "$log" >&2
    continue
  fi
  out=$(python3 - "$w" "$log" "$metrics" "$WARMUP" "$cmd" "$base" <<'PY'
import json, re, sys
w, log, metrics, warmup, cmd, base = sys.argv[1:7]
text = open(log).read()
batch, T = map(int, re.search(r"batch  \| (\d+) sequences x (\d+) tokens", text).groups())
rows = [json.loads(l) for l in open(metrics) if l.strip()]
steps = [r for r in rows if r.get("type") == "train" and r["step"] > int(warmup)]
ms = sum(r["ms"] for r in steps) / len(steps)
tok_s = batch * T / (ms / 1e3)
rec = {"world": int(w), "tok_per_s": round(tok_s), "step_ms": round(ms, 2), "timed_steps": len(steps),
       "model": text.split("model  | ")[1].split("\n")[0], "command": cmd}
if base:
    rec["speedup_vs_world1"] = round(tok_s / float(base), 3)
print(json.dumps(rec))
PY
)
  echo "$out"
  [[ -z "$base" && "$w" == 1 ]] && base=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['tok_per_s'])" "$out")
done
