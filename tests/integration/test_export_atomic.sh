#!/usr/bin/env bash
# xtrain_export is all-or-nothing: a re-export that fails midway (a real EFBIG write failure under
# `ulimit -f`) leaves the previous export byte-identical and no staging files; a registry update
# that fails (EFBIG again) undoes the export it would have recorded; two exports into one --out at
# once leave one checkpoint's config.json with the same checkpoint's model.safetensors.
source "$(dirname "$0")/common.sh"
xt_data
EXPORT="${XTRAIN_BIN_DIR}/xtrain_export"
# two checkpoints that differ in depth, hence in config.json and in model.safetensors
GPT2=("${DATA[@]}" --dim 32 --heads 4 --seq 32 --batch 4 --val-every 0 --log-every 10 --steps 1)
"$XT" "${GPT2[@]}" --layers 1 --ckpt "$WORK/l1.ckpt" > "$WORK/t1.log" 2>&1 || { cat "$WORK/t1.log"; fatal "training 1"; }
"$XT" "${GPT2[@]}" --layers 2 --ckpt "$WORK/l2.ckpt" > "$WORK/t2.log" 2>&1 || { cat "$WORK/t2.log"; fatal "training 2"; }
"$EXPORT" "$WORK/l1.ckpt" --out "$WORK/out" "${TOK[@]}" > /dev/null || fatal "first export"
cp -a "$WORK/out" "$WORK/before"
same_as_before() {  # the export directory holds exactly the files of the first export, byte for byte
  diff -r "$WORK/before" "$WORK/out" > /dev/null || { ls -la "$WORK/out"; fail "$1: the previous export changed"; }
}

# 1. a write failure midway (the model file is ~6.5 MB; at most 1 MB may be written): SIGXFSZ ignored,
# so write(2) returns EFBIG as on a full disk
rc=0
(trap '' XFSZ; ulimit -f 1024; exec "$EXPORT" "$WORK/l2.ckpt" --out "$WORK/out" "${TOK[@]}") > /dev/null 2> "$WORK/e1.log" || rc=$?
[[ $rc -eq 1 ]] || { cat "$WORK/e1.log"; fail "a failed re-export: exit $rc, expected 1"; }
grep -q "File too large" "$WORK/e1.log" || { cat "$WORK/e1.log"; fail "the error names the cause"; }
same_as_before "a re-export that failed writing"
"${XTRAIN_BIN_DIR}/xtrain_generate" --model "$WORK/out" "${TOK[@]}" --prompt x --max-new-tokens 2 > /dev/null ||
  fail "the previous export no longer loads"
echo "a re-export that failed midway left the previous export byte-identical"

# 2. a registry that cannot be written (a 12 MB registry under a 10 MB file size limit, the 6.5 MB model
# fits): the export is undone, the registry unchanged
python3 -c 'import json,sys; json.dump({"models": {"pad": {"note": "x" * (12 << 20)}}}, open(sys.argv[1], "w"))' "$WORK/reg.json"
cp "$WORK/reg.json" "$WORK/reg_before.json"
rc=0
(trap '' XFSZ; ulimit -f 10240; exec "$EXPORT" "$WORK/l2.ckpt" --out "$WORK/out" "${TOK[@]}" --registry "$WORK/reg.json" --name l2) \
  > /dev/null 2> "$WORK/e2.log" || rc=$?
[[ $rc -eq 1 ]] || { cat "$WORK/e2.log"; fail "a failed registry update: exit $rc, expected 1"; }
[[ $(wc -l < "$WORK/e2.log") -eq 1 ]] && grep -q "was undone (its previous files are kept)" "$WORK/e2.log" ||
  { cat "$WORK/e2.log"; fail "one line saying the export was undone"; }
same_as_before "an export whose registry update failed"
cmp "$WORK/reg.json" "$WORK/reg_before.json" || fail "the registry changed"
echo "a registry update that failed undid the export"

# 3. two exports into one --out at once, a few rounds: config.json and model.safetensors always of
# one checkpoint (the layer count of one against the tensors of the other)
for round in 1 2 3 4; do
  "$EXPORT" "$WORK/l1.ckpt" --out "$WORK/race" "${TOK[@]}" > "$WORK/r1.log" 2>&1 & p1=$!
  "$EXPORT" "$WORK/l2.ckpt" --out "$WORK/race" "${TOK[@]}" > "$WORK/r2.log" 2>&1 & p2=$!
  wait $p1 || { cat "$WORK/r1.log"; fail "concurrent export 1"; }
  wait $p2 || { cat "$WORK/r2.log"; fail "concurrent export 2"; }
  python3 - "$WORK/race" <<'PY' || fail "round $round: config.json and model.safetensors of different checkpoints"
import json, struct, sys
d = sys.argv[1]
layers = json.load(open(d + "/config.json"))["n_layer"]
b = open(d + "/model.safetensors", "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
blocks = {k.split(".")[2] for k in h if k.startswith("transformer.h.")}
assert len(blocks) == layers, (layers, sorted(blocks))
PY
done
[[ -z $(ls -A "$WORK/race" | grep -v -x -e config.json -e model.safetensors -e vocab.json -e merges.txt -e tokenizer.json \
        -e tokenizer_config.json -e special_tokens_map.json -e generation_config.json) ]] ||
  { ls -la "$WORK/race"; fail "staging, backup or lock files left behind"; }
echo "concurrent exports into one directory: consistent pairs, nothing left behind (no lock file either)"
xt_finish
