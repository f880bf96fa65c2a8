#!/usr/bin/env bash
# Whole-step training throughput of the real binary on one GPU: for each workload and dtype, runs
#   mpirun -np 1 xtrain_mpi --device cuda --dtype D --attention A <workload> --steps S --val-every 0 --metrics F
# and prints one JSON object per run, every figure from the metrics file: steady-state tok/s and step
# ms (steps after the first W; tok/s = tokens per step / mean step time), peak device memory (the
# backend's allocator), MFU and the parameter count. MFU is xtrain's own (the `mfu` of the train
# records; convention and peak table in src/mfu.cpp, against the peak of the run's dtype): the
# harmonic mean of the timed steps' figures, which is the MFU at the mean step time. null where xtrain
# prints none (a GPU not in its table).
# Usage: bench/bench_gpu.sh            (env: BIN=build-gpu DATA=data STEPS=30 WARMUP=5
#                                        DTYPES="fp32 bf16" WORKLOADS="seed gpt2_124m" LOGDIR=<tmp>
#                                        ATTENTION=auto, passed as --attention)
set -euo pipefail

BIN=${BIN:-build-gpu}
DATA=${DATA:-data}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
DTYPES=${DTYPES:-"fp32 bf16"}
WORKLOADS=${WORKLOADS:-"seed gpt2_124m"}
ATTENTION=${ATTENTION:-auto}
LOGDIR=${LOGDIR:-$(mktemp -d)}
mkdir -p "$LOGDIR"

workload_args() {
  case "$1" in
    seed) echo "--dim 384 --heads 12 --head-dim 32 --layers 12 --ffn 1536 --seq 256 --batch 32" ;;
    gpt2_124m) echo "--dim 768 --heads 12 --head-dim 64 --layers 12 --ffn 3072 --seq 1024 --batch 16" ;;
    *) echo "unknown workload $1" >&2; exit 2 ;;
  esac
}

for w in $WORKLOADS; do
  for d in $DTYPES; do
    log="$LOGDIR/$w.$d.log" metrics="$LOGDIR/$w.$d.jsonl"
    rm -f "$metrics"
    cmd="mpirun --allow-run-as-root -np 1 $BIN/xtrain_mpi --device cuda --dtype $d --attention $ATTENTION $(workload_args "$w")
         --data $DATA/brown.txt --encoder-json $DATA/gpt2/encoder.json --vocab-bpe $DATA/gpt2/vocab.bpe
         --val-every 0 --steps $STEPS --log-every 10 --metrics $metrics"
    cmd=$(echo $cmd)  # one line
    if ! $cmd >"$log" 2>&1; then
      echo "{\"workload\": \"$w\", \"dtype\": \"$d\", \"error\": \"run failed, see $log\"}"
      tail -5 "$log" >&2
      continue
    fi
    python3 - "$w" "$d" "$metrics" "$WARMUP" "$cmd" <<'EOF'
import json, sys
w, d, metrics, warmup, cmd = sys.argv[1:6]
rows = [json.loads(l) for l in open(metrics) if l.strip()]
train = [r for r in rows if r.get("type") == "train"]
final = [r for r in rows if r.get("type") == "final"][-1]
steps = [r for r in train if r["step"] > int(warmup)]
ms = sum(r["ms"] for r in steps) / len(steps)
tokens_per_step = final["tokens_seen"] // final["step"]
tok_s = tokens_per_step / (ms / 1e3)
# mfu is proportional to 1/ms, so the harmonic mean over the steps is the MFU at their mean step time.
mfu = len(steps) / sum(1 / r["mfu"] for r in steps) if all("mfu" in r for r in steps) else None
peak = final.get("peak_memory_bytes")
print(json.dumps({"workload": w, "dtype": d, "tok_per_s": round(tok_s), "step_ms": round(ms, 2),
                  "peak_device_mib": round(peak / 2**20) if peak else None,
                  "mfu": round(mfu, 4) if mfu is not None else None, "params": final["params"],
                  "timed_steps": len(steps), "final_loss": train[-1]["loss"], "command": cmd}))
EOF
  done
done
