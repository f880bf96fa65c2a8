#!/usr/bin/env bash
# The bucketed gradient all-reduce overlapped with the backward pass on one GPU host.
# Runs on the GPU host itself, from the repository root, with build-gpu/xtrain_mpi and data/ present.
# Usage: bench/overlap_gpu.sh OUTDIR [NP]      (NP = ranks = GPUs, default 2)
# For GPT-2 124M (T 1024, 32 sequences per GPU) and the design configuration (T 256, 64 sequences
# per GPU), bf16: steady-state tok/s (median of the steps after WARMUP, default 5) at world 1 (its step a
# CUDA graph, --cuda-graph auto), and at world NP with --bucket-mb 0 (one all-reduce after backward), 25
# (overlapped) and 25 with --cuda-graph on (the overlapped step, NCCL collectives included, launched as a
# CUDA graph); speed-up and efficiency against world 1 as a markdown table (OUTDIR/table.md). Also checks
# that the three world-NP runs give the same losses (bitwise equal at world 2; docs/scaling.md). Then xtrain's own --timeline of both
# configurations (OUTDIR/timeline_<config>.json, Chrome trace; bench/timeline_summary.py prints per step
# the backward, the all-reduces and their overlap). With nsys on PATH, a timeline of a few overlapped
# steps of the design configuration goes to OUTDIR/overlap.nsys-rep.
set -euo pipefail
OUT=${1:?usage: bench/overlap_gpu.sh OUTDIR [NP]}
NP=${2:-2}
BIN=${BIN:-build-gpu}  # the directory of the CUDA build's programs, as in every bench script
XT=$BIN/xtrain_mpi
: "${STEPS:=40}" "${WARMUP:=5}"
source "$(dirname "$0")/common.sh"
xt_help "$@"  # -h/--help: the header comment above
mkdir -p "$OUT"
[[ -x "$XT" ]] || { echo "error: $XT not found or not executable (build with -DXTRAIN_CUDA=ON first)"; exit 1; }
MPI=(mpirun --allow-run-as-root --bind-to none)
D=("${XT_DATA_ARGS[@]}")
COMMON=(--device cuda --dtype bf16 --val-every 0 --log-every 10 --steps "$STEPS")
declare -A CFG=([gpt2-124m]="$(xt_workload_model gpt2-124m)" [design]="$(xt_workload_model design)")
declare -A PER_GPU=([gpt2-124m]=32 [design]=64)

read -r -a design <<<"${CFG[design]}"
"$XT" "${D[@]}" "${design[@]}" --device cuda --steps 1 --batch 8 > "$OUT/cache.log" 2>&1 ||
  { tail -n 20 "$OUT/cache.log"; echo "FAIL: token cache run"; exit 1; }
run() {  # run NAME NP BUCKET_MB [GRAPH]: one training run, metrics in OUTDIR/NAME_wNP_bBUCKET[_graph].jsonl
  local name=$1 np=$2 mb=$3 graph=${4:-auto} tag="$1_w$2_b$3"
  [[ $graph == on ]] && tag+="_graph"
  read -r -a model <<<"${CFG[$name]}"
  echo "-- $name, world $np, --bucket-mb $mb, --cuda-graph $graph"
  "${MPI[@]}" -np "$np" "$XT" "${D[@]}" "${model[@]}" "${COMMON[@]}" --batch $((PER_GPU[$name] * np)) \
    --bucket-mb "$mb" --cuda-graph "$graph" --metrics "$OUT/$tag.jsonl" > "$OUT/$tag.log" 2>&1 ||
    { tail -n 20 "$OUT/$tag.log"; echo "FAIL: $tag"; exit 1; }
  if [[ $graph == on ]] && ! grep -q "with the gradient all-reduce recorded" "$OUT/$tag.log"; then
    grep "cuda graph" "$OUT/$tag.log"; echo "FAIL: $tag: the step was not recorded (the column would show launches)"; exit 1
  fi
}
for name in design gpt2-124m; do
  run "$name" 1 0
  run "$name" "$NP" 0
  run "$name" "$NP" 25
  run "$name" "$NP" 25 on
done

"$PY" - "$OUT" "$NP" "$WARMUP" <<'PY' | tee "$OUT/table.md"
import os, sys
sys.path.insert(0, os.environ["XT_BENCH_DIR"])
from steady import steady
out, n, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def run(tag):
    return steady(f"{out}/{tag}.jsonl", warmup)
def toks(tag):
    return run(tag)["median_tok_per_s"]
print(f"| config | world 1 tok/s | world {n}, one all-reduce | world {n}, 25 MiB buckets | world {n}, buckets + graph "
      f"| speed-up (one / buckets / + graph) | efficiency (one / buckets / + graph) | losses equal |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for name in ["gpt2-124m", "design"]:
    tags = [f"{name}_w{n}_b0", f"{name}_w{n}_b25", f"{name}_w{n}_b25_graph"]
    t1, ts = toks(f"{name}_w1_b0"), [toks(t) for t in tags]
    same = all(run(t)["losses"] == run(tags[0])["losses"] for t in tags)
    print(f"| {name} | {t1:,.0f} | " + " | ".join(f"{t:,.0f}" for t in ts) + " | "
          + " / ".join(f"{t/t1:.3f}x" for t in ts) + " | " + " / ".join(f"{t/t1/n:.1%}" for t in ts)
          + f" | {'bitwise' if same else 'NO'} |")
PY

for name in design gpt2-124m; do
  echo "-- --timeline: $name, world $NP, 25 MiB buckets, steps 2-4 of 5 (rank 0; ms from the backward's end)"
  read -r -a model <<<"${CFG[$name]}"
  "${MPI[@]}" -np "$NP" "$XT" "${D[@]}" "${model[@]}" "${COMMON[@]}" --steps 5 --batch $((PER_GPU[$name] * NP)) \
    --bucket-mb 25 --timeline "$OUT/timeline_$name.json" > "$OUT/timeline_$name.log" 2>&1 ||
    { tail -n 20 "$OUT/timeline_$name.log"; echo "FAIL: timeline run $name"; exit 1; }
  "$PY" "$XT_BENCH_DIR/timeline_summary.py" "$OUT/timeline_$name.json"
done

if command -v nsys > /dev/null; then
  echo "-- nsys timeline: design, world $NP, 25 MiB buckets, 8 steps (rank 0)"
  read -r -a model <<<"${CFG[design]}"
  "${MPI[@]}" -np "$NP" bash -c 'if [[ $OMPI_COMM_WORLD_RANK == 0 ]]; then exec nsys profile -t cuda,nvtx -o "$0/overlap" --force-overwrite true "${@:1}"; else exec "${@:1}"; fi' \
    "$OUT" "$XT" "${D[@]}" "${model[@]}" "${COMMON[@]}" --steps 8 --batch $((64 * NP)) --bucket-mb 25 \
    > "$OUT/nsys.log" 2>&1 || { tail -n 20 "$OUT/nsys.log"; echo "nsys run failed (the table above stands)"; }
fi
