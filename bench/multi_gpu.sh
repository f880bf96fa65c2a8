#!/usr/bin/env bash
# Multi-GPU gates, placement, throughput and failure on one GPU host.
# Runs on the GPU host itself, from the repository root, with build-gpu/xtrain_mpi and data/ present.
# Usage: bench/multi_gpu.sh OUTDIR [NP]      (NP = ranks = GPUs, default 2)
# Prints: the GPU gates (tests/integration/test_gpu_gates.sh: gpt2 and llama, fp32 and bf16, world 2/4/8 vs 1, mpirun and
# threads, placement), the placement table, the duplicate-GPU refusal, seed-config tok/s at world 1
# and NP (32 sequences per GPU, bf16) with the speed-up, and the time a job needs to end after
# kill -9 of rank 1. `nvidia-smi topo -m` goes to OUTDIR/topo.txt. Exits non-zero when a gate fails
# (after the other measurements) or a run fails (at once).
# Env: BIN=build-gpu (the directory of xtrain_mpi) DATA=data STEPS=40 WARMUP=5 (seed-config runs: steps, steps left out of tok/s).
set -euo pipefail
OUT=${1:?usage: bench/multi_gpu.sh OUTDIR [NP]}
NP=${2:-2}
BIN=${BIN:-build-gpu}  # the directory of the CUDA build's programs, as in every bench script
XT=$BIN/xtrain_mpi
: "${STEPS:=40}" "${WARMUP:=5}"
source "$(dirname "$0")/common.sh"
xt_help "$@"  # -h/--help: the header comment above
mkdir -p "$OUT"
MPI=(mpirun --allow-run-as-root --bind-to none)
D=("${XT_DATA_ARGS[@]}")
GATE=(--dim 256 --heads 8 --kv-heads 4 --layers 4 --seq 256 --batch 32 --steps 30 --val-every 0 --log-every 10 --device cuda)
read -r -a SEED <<<"$(xt_workload_model seed)"
SEED+=(--steps "$STEPS" --val-every 0 --log-every 20 --device cuda --dtype bf16)
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1 || true; cat "$OUT/topo.txt"
[[ -x "$XT" ]] || { echo "error: $XT not found or not executable (build with -DXTRAIN_CUDA=ON first)"; exit 1; }

echo "== gates (tests/integration/test_gpu_gates.sh; logs in $OUT/gates)"
gates_rc=0
XTRAIN_BIN_DIR="$BIN" XTRAIN_DATA_DIR="$DATA" bash tests/integration/test_gpu_gates.sh "$OUT/gates" || gates_rc=$?
echo "== placement (world 2, mpirun)"; grep -A2 "^rank " "$OUT/gates/gpt2_mpi_fp32_w2.log" || true

echo "== duplicate GPU: CUDA_VISIBLE_DEVICES=0 for both ranks"
rc=0; CUDA_VISIBLE_DEVICES=0 timeout 120 "${MPI[@]}" -np 2 "$XT" "${D[@]}" "${GATE[@]}" --steps 2 > "$OUT/dup.log" 2>&1 || rc=$?
echo "exit $rc: $(grep -m1 '^rank' "$OUT/dup.log" || echo 'no rank line')"

echo "== throughput, seed config, 32 sequences per GPU, bf16 (tok/s = median of steps $((WARMUP + 1))..$STEPS)"
for np in 1 "$NP"; do
  "${MPI[@]}" -np "$np" "$XT" "${D[@]}" "${SEED[@]}" --batch $((32 * np)) --metrics "$OUT/seed_w$np.jsonl" \
    > "$OUT/seed_w$np.log" 2>&1 || { tail -n 20 "$OUT/seed_w$np.log"; echo "FAIL: seed run at world $np"; exit 1; }
done
"$PY" - "$OUT" "$NP" "$WARMUP" <<'PY'
import os, sys
sys.path.insert(0, os.environ["XT_BENCH_DIR"])
from steady import steady
out, np_, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def toks(w):
    return steady(f"{out}/seed_w{w}.jsonl", warmup)["median_tok_per_s"]
t1, tn = toks(1), toks(np_)
print(f"world 1: {t1:,.0f} tok/s; world {np_}: {tn:,.0f} tok/s; speed-up {tn/t1:.2f}x, efficiency {tn/t1/np_:.1%}")
PY

echo "== kill -9 of rank 1 mid-training (--comm-timeout 30)"
"${MPI[@]}" -np "$NP" "$XT" "${D[@]}" "${SEED[@]}" --batch $((32 * NP)) --steps 100000 --log-every 50 --comm-timeout 30 \
  > "$OUT/kill.log" 2>&1 &
job=$!
victim=""
for _ in $(seq 600); do
  for p in $(pgrep -f "$XT" || true); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
  done
  if [[ -n "$victim" ]] && grep -q "^step" "$OUT/kill.log"; then break; fi
  sleep 0.1
done
[[ -n "$victim" ]] || { echo "FAIL: rank 1 of the kill run not found"; exit 1; }
t0=$(date +%s.%N); kill -9 "$victim"
jrc=0; wait $job || jrc=$?
t1=$(date +%s.%N)
left=$( (pgrep -f "$XT" || true) | wc -l)
echo "job exit $jrc, $(python3 -c "print(f'{$t1-$t0:.1f}')") s after the kill, xtrain processes left: $left"
grep -E "rank [0-9]|noticed|Killed|signal" "$OUT/kill.log" | head -4 || true
((gates_rc == 0)) || { echo "FAIL: the GPU gates failed (exit $gates_rc; see above)"; exit "$gates_rc"; }
