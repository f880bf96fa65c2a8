#!/usr/bin/env bash
# Multi-GPU gates, placement, throughput and failure on one GPU host (issues #5 and #6).
# Runs ON the GPU machine from the repository root, with build-gpu/xtrain_mpi and data/ present.
# Usage: bench/multi_gpu.sh OUTDIR [NP]      (NP = ranks = GPUs, default 2)
# Prints: gate 1/2 figures (fp32 and bf16, NP vs 1), the placement table, the duplicate-GPU refusal,
# seed-config tok/s at world 1 and NP (32 sequences per GPU, bf16) with the speed-up, and the time a
# job needs to end after kill -9 of rank 1. `nvidia-smi topo -m` goes to OUTDIR/topo.txt.
set -uo pipefail
OUT=${1:?usage: bench/multi_gpu.sh OUTDIR [NP]}
NP=${2:-2}
BIN=${BIN:-build-gpu/xtrain_mpi}
mkdir -p "$OUT"
MPI=(mpirun --allow-run-as-root --bind-to none)
D=(--data data/brown.txt --encoder-json data/gpt2/encoder.json --vocab-bpe data/gpt2/vocab.bpe)
GATE=(--dim 256 --heads 8 --kv-heads 4 --layers 4 --seq 256 --batch 32 --steps 30 --val-every 0 --log-every 10 --device cuda)
SEED=(--dim 384 --heads 12 --head-dim 32 --layers 12 --ffn 1536 --seq 256 --steps 40 --val-every 0 --log-every 20
      --device cuda --dtype bf16)
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1; cat "$OUT/topo.txt"

echo "== gates: world $NP vs world 1, 30 steps"
for dtype in fp32 bf16; do
  for np in 1 "$NP"; do
    "${MPI[@]}" -np "$np" "$BIN" "${D[@]}" "${GATE[@]}" --dtype "$dtype" --metrics "$OUT/gate_${dtype}_w$np.jsonl" \
      > "$OUT/gate_${dtype}_w$np.log" 2>&1 || { echo "run failed: $dtype world $np"; tail -5 "$OUT/gate_${dtype}_w$np.log"; }
  done
  python3 tests/gate_compare.py "$OUT/gate_${dtype}_w1.jsonl" "$OUT/gate_${dtype}_w$NP.jsonl" --label "$dtype world $NP vs 1"
done
echo "== placement (world $NP)"; grep -A"$NP" "^rank " "$OUT/gate_fp32_w$NP.log"

echo "== duplicate GPU: CUDA_VISIBLE_DEVICES=0 for both ranks"
rc=0; CUDA_VISIBLE_DEVICES=0 timeout 120 "${MPI[@]}" -np 2 "$BIN" "${D[@]}" "${GATE[@]}" --steps 2 > "$OUT/dup.log" 2>&1 || rc=$?
echo "exit $rc: $(grep -m1 '^rank' "$OUT/dup.log")"

echo "== throughput, seed config, 32 sequences per GPU, bf16 (tok/s = median of steps 6..40)"
for np in 1 "$NP"; do
  "${MPI[@]}" -np "$np" "$BIN" "${D[@]}" "${SEED[@]}" --batch $((32 * np)) --metrics "$OUT/seed_w$np.jsonl" > "$OUT/seed_w$np.log" 2>&1
done
python3 - "$OUT" "$NP" <<'PY'
import json, statistics, sys
out, np_ = sys.argv[1], int(sys.argv[2])
def toks(w):
    rs = [json.loads(l) for l in open(f"{out}/seed_w{w}.jsonl")]
    return statistics.median(r["tok_per_s"] for r in rs if r.get("type") == "train" and r["step"] > 5)
t1, tn = toks(1), toks(np_)
print(f"world 1: {t1:,.0f} tok/s; world {np_}: {tn:,.0f} tok/s; speed-up {tn/t1:.2f}x, efficiency {tn/t1/np_:.1%}")
PY

echo "== kill -9 of rank 1 mid-training (--comm-timeout 30)"
"${MPI[@]}" -np "$NP" "$BIN" "${D[@]}" "${SEED[@]}" --batch $((32 * NP)) --steps 100000 --log-every 50 --comm-timeout 30 \
  > "$OUT/kill.log" 2>&1 &
job=$!
victim=""
for _ in $(seq 600); do
  for p in $(pgrep -f "$BIN" || true); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
  done
  [[ -n "$victim" ]] && grep -q "^step" "$OUT/kill.log" && break
  sleep 0.1
done
t0=$(date +%s.%N); kill -9 "$victim"
wait $job; jrc=$?
t1=$(date +%s.%N)
left=$(pgrep -f "$BIN" | wc -l)
echo "job exit $jrc, $(python3 -c "print(f'{$t1-$t0:.1f}')") s after the kill, xtrain processes left: $left"
grep -E "rank [0-9]|noticed|Killed|signal" "$OUT/kill.log" | head -4
