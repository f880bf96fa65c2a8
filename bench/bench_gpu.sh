#!/usr/bin/env bash
# Whole-step training throughput of the real binary on one GPU: for each workload and dtype, runs
#   mpirun -np 1 xtrain_mpi --device cuda --dtype D <workload> --steps S --val-every 0 --metrics F
# and prints one JSON object per run: steady-state tok/s and step ms (steps after the first W, from
# the metrics file; tok/s = tokens per step / mean step time), peak device memory (the backend's
# allocator, from the run's last lines) and MFU.
# MFU convention (PaLM paper, appendix B): FLOPs per token = 6 N + 12 L C T, N = all parameters
# (embeddings included), attention counted without the causal half, against 989e12 FLOP/s, the
# vendor's dense bf16 tensor-core peak of the H100/H200 SXM (also used for the fp32 runs, so the
# figures compare with the bf16 references in docs/benchmarks.md).
# Usage: bench/bench_gpu.sh            (env: BIN=build-gpu DATA=data STEPS=30 WARMUP=5
#                                        DTYPES="fp32 bf16" WORKLOADS="seed gpt2_124m" LOGDIR=<tmp>)
set -euo pipefail

BIN=${BIN:-build-gpu}
DATA=${DATA:-data}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
DTYPES=${DTYPES:-"fp32 bf16"}
WORKLOADS=${WORKLOADS:-"seed gpt2_124m"}
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
    cmd="mpirun --allow-run-as-root -np 1 $BIN/xtrain_mpi --device cuda --dtype $d $(workload_args "$w")
         --data $DATA/brown.txt --encoder-json $DATA/gpt2/encoder.json --vocab-bpe $DATA/gpt2/vocab.bpe
         --val-every 0 --steps $STEPS --log-every 10 --metrics $metrics"
    cmd=$(echo $cmd)  # one line
    if ! $cmd >"$log" 2>&1; then
      echo "{\"workload\": \"$w\", \"dtype\": \"$d\", \"error\": \"run failed, see $log\"}"
      tail -5 "$log" >&2
      continue
    fi
    python3 - "$w" "$d" "$log" "$metrics" "$WARMUP" "$cmd" <<'EOF'
import json, re, sys
w, d, log, metrics, warmup, cmd = sys.argv[1:7]
text = open(log).read()
m = dict((k, int(v)) for k, v in re.findall(r"\b(V|T|C|L|NH|KVH|HS|F)=(\d+)", text.split("model  |")[1].split("\n")[0]))
V, T, C, L, NH, KVH, HS, F = (m[k] for k in ("V", "T", "C", "L", "NH", "KVH", "HS", "F"))
QKV, A = (NH + 2 * KVH) * HS, NH * HS
N = V * C + T * C + L * (4 * C + QKV * C + QKV + C * A + C + 2 * F * C + F + C) + 2 * C  # param_layout
batch = int(re.search(r"batch  \| (\d+) sequences x (\d+) tokens", text).group(1))
rows = [json.loads(l) for l in open(metrics) if l.strip()]
steps = [r for r in rows if r.get("type") == "train" and r["step"] > int(warmup)]
ms = sum(r["ms"] for r in steps) / len(steps)
tok_s = batch * T / (ms / 1e3)
peak = re.search(r"peak device memory: (\d+) MiB", text)
flops_per_token = 6 * N + 12 * L * C * T
print(json.dumps({"workload": w, "dtype": d, "tok_per_s": round(tok_s), "step_ms": round(ms, 2),
                  "peak_device_mib": int(peak.group(1)) if peak else None,
                  "mfu": round(tok_s * flops_per_token / 989e12, 4), "params": N,
                  "timed_steps": len(steps), "final_loss": [r for r in rows if r.get("type") == "train"][-1]["loss"],
                  "command": cmd}))
EOF
  done
done
