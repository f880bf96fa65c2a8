#!/usr/bin/env bash
# Resume: N steps straight equals N/2 steps, checkpoint, resume, N/2 steps — bitwise on
# CPU: the final checkpoints (parameters, AdamW state, metadata) are byte-identical and the losses of
# the resumed steps are identical; the metrics file records every step once, even after records
# written past the checkpoint by a run that died. World 2 with dropout and grad accumulation, so every piece of
# state (step-keyed batch and dropout streams, AdamW moments, LR schedule) matters. Checkpoints also
# resume across the two launchers (half under mpirun, half under xtrain_threads, and back) and across
# world sizes, for gpt2 and llama.
source "$(dirname "$0")/common.sh"
xt_data
ARGS=("${DATA[@]}" "${TINY[@]}" --steps 12 --dropout 0.1 --grad-accum 2)
LAUNCHER=mpi NP=2
run() {  # run NAME [args]: $NP ranks under $LAUNCHER, output in NAME.log
  local name=$1
  shift
  xt_run_ok "$name" "$LAUNCHER" "$NP" "${ARGS[@]}" "$@"
}
run straight --ckpt "$WORK/straight.ckpt" --metrics "$WORK/straight.jsonl"
run half1 --ckpt "$WORK/resumed.ckpt" --stop-after 6 --metrics "$WORK/resumed.jsonl"
grep -q "checkpoint written" "$WORK/half1.log"
# A run that died after its checkpoint leaves later records and maybe half a line; the resumed run must
# drop them, so every step is recorded once with the resumed run's values.
printf '%s\n' '{"type":"train","step":7,"loss":123.0}' '{"type":"train","step":8,"lo' >> "$WORK/resumed.jsonl"
run half2 --ckpt "$WORK/resumed.ckpt" --resume "$WORK/resumed.ckpt" --metrics "$WORK/resumed.jsonl"
grep -q "resumed from .* at step 6" "$WORK/half2.log" || { cat "$WORK/half2.log"; fatal "half2: no resume line"; }
grep -q "dropped 2 records after step 6" "$WORK/half2.log" || { cat "$WORK/half2.log"; fatal "stale metrics kept"; }
cmp "$WORK/straight.ckpt" "$WORK/resumed.ckpt" || fatal "checkpoints differ after resume"
echo "final checkpoints are byte-identical ($(stat -c %s "$WORK/straight.ckpt") bytes)"
# Checkpoints resume across launchers and world sizes, in each model family: a table of FAMILY FIRST
# SECOND, each half LAUNCHER:RANKS for 6 steps. Against the family's straight run (12 steps at world 2
# under mpirun): at world 2 in both halves the final checkpoint is byte-identical; across world sizes
# the summation order differs, so gates 1 and 2 (gate_compare.py) over the 12 losses of both halves.
# llama runs with the head and the loss in chunks of 20 rows (--logits-chunk-rows; 64 rows a micro-step
# at world 2, 128 at world 1, 32 at world 4: several chunks, a short last one), given to both halves (the
# checkpoint does not hold it), so a resume with the same chunking is byte-identical too.
CASES=(
  "gpt2 mpi:2 threads:2"
  "gpt2 threads:2 mpi:2"
  "llama mpi:2 threads:2"
  "llama mpi:1 threads:4"
  "llama threads:4 mpi:2"
)
xt_family llama
run l_straight --ckpt "$WORK/l_straight.ckpt" --metrics "$WORK/l_straight.jsonl" "${FAM[@]}" --logits-chunk-rows 20
for c in "${CASES[@]}"; do
  read -r family first second <<< "$c"
  xt_family "$family"
  chunk=()
  if [[ $family == llama ]]; then chunk=(--logits-chunk-rows 20); fi
  straight=$([[ $family == gpt2 ]] && echo straight || echo l_straight)
  name="x_${family}_${first/:/}_${second/:/}"
  LAUNCHER=${first%:*} NP=${first#*:} run "$name" --ckpt "$WORK/$name.ckpt" --metrics "$WORK/$name.jsonl" --stop-after 6 "${FAM[@]}" \
    "${chunk[@]}"
  LAUNCHER=${second%:*} NP=${second#*:} run "$name.2" --ckpt "$WORK/$name.ckpt" --metrics "$WORK/$name.jsonl" \
    --resume "$WORK/$name.ckpt" "${chunk[@]}"
  grep -q "resumed from .* at step 6" "$WORK/$name.2.log" || { cat "$WORK/$name.2.log"; fatal "$name.2: no resume line"; }
  if [[ ${first#*:} == 2 && ${second#*:} == 2 ]]; then
    cmp "$WORK/$straight.ckpt" "$WORK/$name.ckpt" || fatal "$c: checkpoints differ"
    echo "$family: 6 steps under $first + 6 under $second: final checkpoint byte-identical to the straight run"
  else
    python3 "$(dirname "$0")/gate_compare.py" "$WORK/$straight.jsonl" "$WORK/$name.jsonl" --min-steps 12 \
      --label "$family: 6 steps under $first + 6 under $second vs 12 under mpi:2" || fatal "$c: gates"
  fi
done
python3 - "$WORK/straight.jsonl" "$WORK/resumed.jsonl" <<'PY'
import json, sys
def losses(p):
    recs = [r for r in map(json.loads, open(p)) if r["type"] == "train"]
    steps = [r["step"] for r in recs]
    assert steps == list(range(1, 13)), f"{p}: train records for steps {steps}, want 1..12 once each"
    return {r["step"]: r["loss"] for r in recs}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
diff = [s for s in a if a[s] != b[s]]
print("losses identical at all 12 steps" if not diff else f"FAIL: losses differ at steps {diff}")
sys.exit(1 if diff else 0)
PY
# What a user watches. Tokenizing prints its progress line (the first run writes the token
# cache; later runs read it and tokenize nothing).
grep -q "^tokenize $WORK/corpus.txt | 0.4 MB in " "$WORK/straight.log" || { cat "$WORK/straight.log"; fatal "no tokenize line"; }
! grep -q "^tokenize " "$WORK/half1.log" || fatal "a tokenize line with a valid token cache"
# The run summary: each segment's final record names its steps, counts the tokens of every segment, and
# carries the checkpoint's digest, the XXH3-64 stored in the file's last 8 bytes (printed the same way).
python3 - "$WORK/resumed.jsonl" "$WORK/resumed.ckpt" "$WORK/half2.log" <<'PY'
import json, struct, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
finals = [r for r in recs if r["type"] == "final"]
assert [(f["first_step"], f["step"]) for f in finals] == [(1, 6), (7, 12)], finals
f = finals[-1]
digest = "%016x" % struct.unpack("<Q", open(sys.argv[2], "rb").read()[-8:])[0]
last_train = [r for r in recs if r["type"] == "train"][-1]
# TINY's parameters counted by hand, on purpose apart from the parameter table (an independent count of
# what the summary reports): wte (Vp = 50304 rows), wpe, per layer 2 layernorms, qkv, attention
# projection, fc, fc projection with biases, the final layernorm.
Vp, C, T, L, NH, KVH, HS, F = 50304, 32, 32, 2, 4, 2, 8, 128
QKV = (NH + 2 * KVH) * HS
PARAMS = Vp * C + T * C + L * (4 * C + QKV * C + QKV + C * NH * HS + C + 2 * F * C + F + C) + 2 * C
want = {"world_size": 2, "tokens_seen": 12 * 8 * 32, "params": PARAMS, "ckpt": sys.argv[2], "ckpt_xxh3": digest,
        "loss": last_train["loss"], "max_param_diff": 0.0}
bad = {k: (f.get(k), v) for k, v in want.items() if f.get(k) != v}
assert not bad, f"final record fields (have, want): {bad}"
assert f["wall_s"] > 0 and f["tok_per_s"] > 0, f
# CPU: no MFU and no device memory figures; --val-every 0: no validation loss.
assert not {"mfu", "peak_memory_bytes", "val_loss", "val_step"} & f.keys(), f
assert not {"mfu", "mem_in_use_bytes", "peak_memory_bytes"} & last_train.keys(), last_train
log = open(sys.argv[3]).read()
assert f"\nckpt   | {sys.argv[2]} | xxh3 {digest}\n" in log, log
assert "\ndone   | steps 7-12 | world 2 | 3,072 tokens seen | wall " in log, log
print(f"final record: steps 7-12, 3072 tokens seen, checkpoint digest {digest} matches the file")
PY
