#!/usr/bin/env bash
# Whole-step training throughput of the real binary on one GPU: for each workload and dtype, runs
#   mpirun -np 1 xtrain_mpi --device cuda --dtype D --attention A <workload> --steps S --val-every 0 --metrics F
# and prints one JSON object per run, every figure from the metrics file: steady-state tok/s and step
# ms (steps after the first W; tok/s = tokens per step / mean step time), peak device memory (the
# backend's allocator), MFU and the parameter count. MFU is xtrain's own (the `mfu` of the train
# records; convention and peak table in src/train/mfu.cpp, against the peak of the run's dtype): the
# harmonic mean of the timed steps' figures, which is the MFU at the mean step time. null where xtrain
# prints none (a GPU not in its table).
# Where python3 has torch, each run is followed in the same session by bench/compare_pytorch.py on the same
# workload arguments, dtype and steps (eager and torch.compile), and its record adds pytorch_eager and
# pytorch_compile (tok/s), their peak memory and parameter count, and the ratios xtrain_over_eager and
# xtrain_over_compile (PyTorch's vocabulary is the V of xtrain's "model |" line); PYTORCH=0 leaves
# them out, PYTORCH=1 requires torch.
# Exits 1 when a run failed (its record says so; the others still run), 2 on a bad setting.
# Usage: bench/bench_gpu.sh            (env: BIN=build-gpu DATA=data STEPS=30 WARMUP=5
#                                        DTYPES="fp32 bf16" WORKLOADS="seed gpt2_124m" LOGDIR=<tmp>
#                                        ATTENTION=auto, passed as --attention; EXTRA_ARGS="" at the end
#                                        of each xtrain command, e.g. "--cuda-graph off" (common.sh);
#                                        PYTORCH=auto PY=python3)
set -euo pipefail
set -f  # the commands are kept as one line of words and split unquoted: no pathname expansion of them

: "${BIN:=build-gpu}" "${STEPS:=30}" "${WARMUP:=5}"
source "$(dirname "$0")/common.sh"
xt_help "$@"
xt_require_bin "$BIN"
DTYPES=${DTYPES:-"fp32 bf16"}
WORKLOADS=${WORKLOADS:-"seed gpt2_124m"}
ATTENTION=${ATTENTION:-auto}
PYTORCH=${PYTORCH:-auto}
xt_logdir

case "$PYTORCH" in
  auto) if "$PY" -c "import torch" 2>/dev/null; then PYTORCH=1; else PYTORCH=0; fi ;;
  1) "$PY" -c "import torch" 2>/dev/null || { echo "bench_gpu.sh: PYTORCH=1 but $PY cannot import torch" >&2; exit 2; } ;;
  0) ;;
  *) echo "bench_gpu.sh: PYTORCH must be auto, 0 or 1 (got '$PYTORCH')" >&2; exit 2 ;;
esac

failed=0
for w in $WORKLOADS; do
  args=$(xt_workload_args "$w")
  for d in $DTYPES; do
    log="$LOGDIR/$w.$d.log" metrics="$LOGDIR/$w.$d.jsonl" torch_log="$LOGDIR/$w.$d.pytorch.log"
    cmd="mpirun --allow-run-as-root -np 1 $BIN/xtrain_mpi --device cuda --dtype $d --attention $ATTENTION $args
         $(xt_workload_data "$w")
         --val-every 0 --steps $STEPS --log-every 10 --metrics $metrics ${XT_EXTRA_ARGS[*]}"
    cmd=$(echo $cmd)  # one line
    # shellcheck disable=SC2086  # the command is one line of words, as recorded
    if ! xt_train "$log" "$metrics" $cmd; then
      echo "{\"workload\": \"$w\", \"dtype\": \"$d\", \"error\": \"run failed, see $log\"}"
      failed=1
      continue
    fi
    : >"$torch_log"
    if [[ $PYTORCH == 1 ]]; then
      # shellcheck disable=SC2086
      # the vocabulary xtrain ran with, from its "model | V=..." line
      vocab=$(sed -n 's/^model *| V=\([0-9]*\) .*/\1/p' "$log" | head -1)
      "$PY" "$XT_BENCH_DIR/compare_pytorch.py" $args --vocab "${vocab:-0}" --encoder-json "$DATA/gpt2/encoder.json" --dtype "$d" \
        --steps "$STEPS" --bench-warmup "$WARMUP" >"$torch_log" 2>&1 || tail -5 "$torch_log" >&2
    fi
    "$PY" - "$w" "$d" "$metrics" "$WARMUP" "$cmd" "$torch_log" <<'EOF'
import json, os, sys
sys.path.insert(0, os.environ["XT_BENCH_DIR"])
from steady import steady
w, d, metrics, warmup, cmd, torch_log = sys.argv[1:7]
s = steady(metrics, int(warmup))
rec = {"workload": w, "dtype": d, "tok_per_s": round(s["tok_per_s"]), "step_ms": round(s["step_ms"], 2),
       "peak_device_mib": round(s["peak_device_mib"]) if s["peak_device_mib"] else None,
       "mfu": round(s["mfu"], 4) if s["mfu"] is not None else None, "params": s["params"],
       "timed_steps": s["timed_steps"], "final_loss": s["final_loss"], "command": cmd}
# PyTorch figures (compare_pytorch.py: one JSON line per mode, or "skipped: ..."), beside xtrain's.
lines = open(torch_log).read().splitlines()
for line in lines:
    if line.startswith("{"):
        t = json.loads(line)
        rec[f"pytorch_{t['mode']}"] = t["tok_per_s"]
        rec[f"xtrain_over_{t['mode']}"] = round(s["tok_per_s"] / t["tok_per_s"], 3)
        rec[f"pytorch_{t['mode']}_peak_device_mib"] = t["peak_device_mib"]
        rec[f"pytorch_params"] = t.get("params")
    elif line.startswith("skipped:"):
        rec["pytorch"] = line
if lines and not any(k.startswith("pytorch") for k in rec):
    rec["pytorch"] = f"failed, see {torch_log}"
print(json.dumps(rec))
EOF
  done
done
exit "$failed"
