#!/usr/bin/env bash
# xtrain_export and --init-from end to end: two exports of one checkpoint are
# byte-identical; the registry check passes, and fails naming both digests after one byte of the
# export changes; export -> --init-from -> checkpoint -> export gives the same bytes (bitwise round
# trip); GPT-2-inexpressible shapes go to the xtrain layout and refuse --format hf with one line;
# unwritable output, shape mismatches and a missing or bad config.json (--init-from and xtrain_generate
# --model alike) are one line with exit 1; another tokenizer than the checkpoint's is a usage error (exit 2)
# at export as at --init-from; an input is never an output, nor --out the token cache directory or
# below it (beside it is fine); 6
# concurrent exports to one registry record 6 entries; a bad registry or a taken name writes nothing;
# a refused re-export leaves the previous export; symlinks in --out and FIFO inputs
# are refused with one line; a failed stdout write is exit 1.
source "$(dirname "$0")/common.sh"
xt_data
EXPORT="${XTRAIN_BIN_DIR}/xtrain_export"
GEN="${XTRAIN_BIN_DIR}/xtrain_generate"
# GPT-2 shaped (kv-heads = heads, heads x head-dim = dim); a plain process, no launcher needed
GPT2=("${DATA[@]}" --dim 32 --heads 4 --layers 2 --seq 32 --batch 4 --val-every 0 --log-every 10)
"$XT" "${GPT2[@]}" --steps 3 --ckpt "$WORK/a.ckpt" > "$WORK/train.log" 2>&1 || { cat "$WORK/train.log"; fatal "training"; }

# 1. deterministic bytes; the digests printed are those of the file
"$EXPORT" "$WORK/a.ckpt" --out "$WORK/e1" "${TOK[@]}" --registry "$WORK/reg.json" --name tiny > "$WORK/e1.log" || fatal "export"
"$EXPORT" "$WORK/a.ckpt" --out "$WORK/e2" "${TOK[@]}" > "$WORK/e2.log" || fatal "second export"
cat "$WORK/e1.log"
for f in model.safetensors config.json vocab.json merges.txt; do cmp "$WORK/e1/$f" "$WORK/e2/$f" || fail "$f differs between exports"; done
md5=$(md5sum < "$WORK/e1/model.safetensors" | cut -d' ' -f1)
grep -q "^md5    $md5 " "$WORK/e1.log" || fail "printed md5 is not md5sum's $md5"
grep -q "^sha256 $(sha256sum < "$WORK/e1/model.safetensors" | cut -d' ' -f1) " "$WORK/e1.log" || fail "printed sha256"
grep -q "layout hf" "$WORK/e1.log" || fail "a GPT-2 shape exports in the hf layout"
echo "two exports byte-identical, md5 $md5"
# An independent reading of the file by the safetensors spec (Python standard library only): header,
# contiguous offsets from the end of the header, GPT-2 names and Conv1D shapes, and data where the
# offsets point (LayerNorm weights start at 1 and move little in 3 steps; biases start at 0).
python3 - "$WORK/e1/model.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
assert n % 8 == 0 and h.pop("__metadata__") == {"format": "pt", "xtrain_layout": "hf"}
data = b[8 + n:]
ends = sorted((v["data_offsets"][0], v["data_offsets"][1]) for v in h.values())
assert ends[0][0] == 0 and ends[-1][1] == len(data) and all(a[1] == c[0] for a, c in zip(ends, ends[1:]))
assert h["transformer.wte.weight"]["shape"] == [50257, 32] and h["transformer.wpe.weight"]["shape"] == [32, 32]
assert h["transformer.h.1.attn.c_attn.weight"]["shape"] == [32, 96] and h["transformer.h.0.mlp.c_proj.weight"]["shape"] == [128, 32]
assert "lm_head.weight" not in h and len(h) == 2 + 12 * 2 + 2
def floats(name):
    lo, hi = h[name]["data_offsets"]
    return struct.unpack(f"<{(hi - lo) // 4}f", data[lo:hi])
for name in h:
    v = floats(name)
    if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
        assert all(0.9 < x < 1.1 for x in v), name
    elif name.endswith("bias"):
        assert all(abs(x) < 0.1 for x in v), name
    else:
        assert all(abs(x) < 1.0 for x in v) and any(x != 0 for x in v), name
print("model.safetensors read independently: header, offsets, names, shapes and values as expected")
PY

# 2. registry: checkpoint and export verify; one changed byte is caught with both digests named
"$EXPORT" --verify tiny --registry "$WORK/reg.json" "$WORK/a.ckpt" || fail "verify of the checkpoint"
"$EXPORT" --verify tiny --registry "$WORK/reg.json" "$WORK/e2" || fail "verify of the export"
printf '\x01' | dd of="$WORK/e2/model.safetensors" bs=1 seek=4000 conv=notrunc status=none
set +e
"$EXPORT" --verify tiny --registry "$WORK/reg.json" "$WORK/e2" > "$WORK/v.log" 2>&1
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "verify after a changed byte: exit $rc, expected 1"
bad=$(md5sum < "$WORK/e2/model.safetensors" | cut -d' ' -f1)
one_line "$WORK/v.log" "verify tiny: FAILED: .* gives md5 $bad .* expects md5 $md5 "
cat "$WORK/v.log"

# 3. round trip: import the export, take one training step that cannot move a weight (lr 1e-30: a
# change of 1e-30 is below half an ulp of every nonzero weight; the zero ones, the padding rows of wte, get
# no gradient), write
# the checkpoint, export it again: the same model.safetensors. Model options come from config.json;
# both ranks load the directory and end with identical parameters.
"${MPIRUN[@]}" -np 2 "$XT" "${DATA[@]}" --init-from "$WORK/e1" --steps 1 --batch 4 --lr 1e-30 --warmup 0 --weight-decay 0 --val-every 0 \
  --ckpt "$WORK/b.ckpt" > "$WORK/import.log" 2>&1 || { cat "$WORK/import.log"; fatal "--init-from"; }
grep -q "V=50257 T=32 C=32 L=2 NH=4 KVH=4 HS=8 F=128" "$WORK/import.log" || { cat "$WORK/import.log"; fail "model options from config.json"; }
grep -q "max parameter difference across 2 ranks: 0.000e+00" "$WORK/import.log" || { cat "$WORK/import.log"; fail "ranks differ"; }
"$EXPORT" "$WORK/b.ckpt" --out "$WORK/e3" "${TOK[@]}" > /dev/null || fail "export after import"
cmp "$WORK/e1/model.safetensors" "$WORK/e3/model.safetensors" || fail "export -> import -> export changed the weights"
echo "export -> --init-from -> export: model.safetensors byte-identical"
# a requeued fine-tuning job keeps --init-from next to --resume: the checkpoint's weights win
"$XT" "${DATA[@]}" --init-from "$WORK/e1" --resume "$WORK/b.ckpt" --steps 1 --batch 4 --lr 1e-30 --warmup 0 \
  --weight-decay 0 --val-every 0 > "$WORK/requeue.log" 2>&1 || { cat "$WORK/requeue.log"; fail "--init-from with --resume"; }
grep -q "resumed from .* at step 1" "$WORK/requeue.log" && ! grep -q "weights from" "$WORK/requeue.log" ||
  { cat "$WORK/requeue.log"; fail "--resume must win over --init-from"; }

# 4. shape mismatch on import names the tensor, expected and found shapes
set +e
"$XT" "${DATA[@]}" --init-from "$WORK/e1" --dim 64 --steps 1 --batch 4 --val-every 0 > "$WORK/mm.log" 2>&1
rc=$?
set -e
[[ $rc -eq 1 ]] || { cat "$WORK/mm.log"; fail "shape mismatch: exit $rc, expected 1"; }
one_line "$WORK/mm.log" "tensor transformer.wte.weight: expected shape \[50257, 64\], found \[50257, 32\]"

set +e
"$XT" "${DATA[@]}" --init-from "$WORK/nowhere" > "$WORK/nd.log" 2>&1
rc=$?
set -e
[[ $rc -eq 1 ]] || { cat "$WORK/nd.log"; fail "missing --init-from directory: exit $rc, expected 1"; }
one_line "$WORK/nd.log" "^rank 0 (.*): --init-from: cannot read .*nowhere/config.json: No such file"
# a bad config.json is a bad input file: exit 1 and one line naming the field, from --init-from and
# from xtrain_generate --model alike (a field of the wrong JSON type, a missing one, an unsupported value)
bad_config() {  # bad_config NAME PYTHON-EDIT PATTERN: e1 with config.json edited (c is the dict) is refused
  local name=$1 edit=$2 pat=$3 rc
  cp -r "$WORK/e1" "$WORK/bc_$name"
  python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); $edit; json.dump(c, open(p, 'w'))" "$WORK/bc_$name/config.json"
  rc=0; "$XT" "${DATA[@]}" --init-from "$WORK/bc_$name" --steps 1 --batch 4 --val-every 0 > "$WORK/bc.log" 2>&1 || rc=$?
  [[ $rc -eq 1 ]] || { cat "$WORK/bc.log"; fail "--init-from, config.json $name: exit $rc, expected 1"; }
  one_line "$WORK/bc.log" "^rank 0 (.*): --init-from: .*bc_$name/config.json: $pat"
  rc=0; "$GEN" --model "$WORK/bc_$name" --prompt x --max-new-tokens 1 > /dev/null 2> "$WORK/bc.log" || rc=$?
  [[ $rc -eq 1 ]] || { cat "$WORK/bc.log"; fail "--model, config.json $name: exit $rc, expected 1"; }
  one_line "$WORK/bc.log" "^xtrain_generate: error: .*bc_$name/config.json: $pat"
  echo "ok   config.json $name: exit 1 from --init-from and --model: $(cat "$WORK/bc.log")"
}
bad_config wrong_type 'c["activation_function"] = 7' "activation_function has the wrong JSON type, found 7"
bad_config missing_field 'del c["n_embd"]' "missing n_embd"
bad_config unsupported 'c["activation_function"] = "relu"' "activation_function relu is not supported"

# an export made with another tokenizer (two merges swapped: another fingerprint) is refused up front
cp -r "$WORK/e1" "$WORK/e_tok"
{ head -n -2 "$WORK/e1/merges.txt"; tail -n 1 "$WORK/e1/merges.txt"; tail -n 2 "$WORK/e1/merges.txt" | head -n 1; } \
  > "$WORK/e_tok/merges.txt"
set +e
"$XT" "${DATA[@]}" --init-from "$WORK/e_tok" --steps 1 --batch 4 --val-every 0 > "$WORK/tk.log" 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] || { cat "$WORK/tk.log"; fail "--init-from with another tokenizer: exit $rc, expected 2"; }
one_line "$WORK/tk.log" "usage error: --init-from .*e_tok was trained with another tokenizer"
# the same mismatch at export (the checkpoint trained with GPT-2's files, the swapped merges given): a usage
# error too, exit 2 as the trainer's, and nothing written
set +e
"$EXPORT" "$WORK/a.ckpt" --out "$WORK/e_tokx" --encoder-json "$WORK/e_tok/vocab.json" --vocab-bpe "$WORK/e_tok/merges.txt" \
  > "$WORK/tkx.log" 2>&1
rc=$?
set -e
[[ $rc -eq 2 && ! -e "$WORK/e_tokx/model.safetensors" ]] || { cat "$WORK/tkx.log"; fail "export with another tokenizer: exit $rc, expected 2"; }
one_line "$WORK/tkx.log" "^xtrain_export: usage error: tokenizer .* is not the one the model was trained with (.*): give the run's tokenizer options"

# 5. grouped-query attention: xtrain layout by default, --format hf refused with the reason
"$XT" "${DATA[@]}" "${TINY[@]}" --steps 1 --ckpt "$WORK/g.ckpt" > "$WORK/g.log" 2>&1 || { cat "$WORK/g.log"; fatal "GQA training"; }
set +e
"$EXPORT" "$WORK/g.ckpt" --out "$WORK/g_hf" --format hf "${TOK[@]}" > "$WORK/ghf.log" 2>&1
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "--format hf accepted a GQA model"
one_line "$WORK/ghf.log" "cannot express this model: --kv-heads 2 < --heads 4: GPT-2 has no grouped-query attention"
[[ ! -e "$WORK/g_hf/model.safetensors" ]] || fail "a refused export left a model file"
"$EXPORT" "$WORK/g.ckpt" --out "$WORK/g_x" "${TOK[@]}" --registry "$WORK/reg.json" --name gqa | grep -q "layout xtrain" ||
  fail "GQA model not in the xtrain layout"
"$EXPORT" --verify gqa --registry "$WORK/reg.json" "$WORK/g.ckpt" > /dev/null || fail "verify re-exports in the recorded layout"
"$EXPORT" --verify tiny --registry "$WORK/reg.json" "$WORK/a.ckpt" > /dev/null || fail "a second entry dropped the first"
grep -q '"model_type": "xtrain-gpt"' "$WORK/g_x/config.json" || fail "xtrain config.json"
"$XT" "${DATA[@]}" --init-from "$WORK/g_x" --steps 1 --batch 8 --val-every 0 > "$WORK/gi.log" 2>&1 || { cat "$WORK/gi.log"; fail "import of the xtrain layout"; }

# 6. unwritable output: one line, exit 1, nothing written
: > "$WORK/file"
set +e
"$EXPORT" "$WORK/a.ckpt" --out "$WORK/file/sub" "${TOK[@]}" > "$WORK/uw.log" 2>&1
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "unwritable output: exit $rc, expected 1"
one_line "$WORK/uw.log" "--out .*file/sub: .*file is not a directory"

# expect_export RC PATTERN ARGS...: one line matching PATTERN, exit RC, never a hang (timeout)
expect_export() {
  local want=$1 pat=$2 rc=0
  shift 2
  timeout 60 "$EXPORT" "$@" > /dev/null 2> "$WORK/x.log" || rc=$?
  [[ $rc -eq $want ]] || { cat "$WORK/x.log"; fail "$* -> exit $rc, expected $want"; }
  one_line "$WORK/x.log" "$pat"
  echo "ok   exit $rc: $(cat "$WORK/x.log")"
}
# 7. an input is never an output: a checkpoint inside DIR under an output's name, the registry
mkdir -p "$WORK/d"
cp "$WORK/a.ckpt" "$WORK/d/config.json"
expect_export 2 "usage error: input .*d/config.json is also an output" "$WORK/d/config.json" --out "$WORK/d" "${TOK[@]}"
cmp "$WORK/a.ckpt" "$WORK/d/config.json" || fail "the input checkpoint was changed"
# nor is DIR the per-user cache directory, where tokenizer tables are named by content, nor inside it at any
# depth (as given, through a symbolic link to it, or not yet made); beside it is fine
mkdir -p "$WORK/xdg/xtrain"
XDG_CACHE_HOME="$WORK/xdg" expect_export 2 "usage error: --out .*xdg/xtrain is the token cache directory .*xdg/xtrain (.XDG_CACHE_HOME/xtrain:" \
  "$WORK/a.ckpt" --out "$WORK/xdg/xtrain" "${TOK[@]}"
XDG_CACHE_HOME="$WORK/xdg" expect_export 2 "usage error: --out .*xdg/xtrain/models/run is inside the token cache directory .*xdg/xtrain " \
  "$WORK/a.ckpt" --out "$WORK/xdg/xtrain/models/run" "${TOK[@]}"
mkdir -p "$WORK/xdg/xtrain/models"
ln -s "$WORK/xdg/xtrain" "$WORK/cache-link"
XDG_CACHE_HOME="$WORK/xdg" expect_export 2 "usage error: --out .*cache-link/models is inside the token cache directory" \
  "$WORK/a.ckpt" --out "$WORK/cache-link/models" "${TOK[@]}"
ln -s "$WORK/xdg/xtrain/models" "$WORK/models-link"
XDG_CACHE_HOME="$WORK/xdg" expect_export 2 "usage error: --out .*models-link is inside the token cache directory" \
  "$WORK/a.ckpt" --out "$WORK/models-link" "${TOK[@]}"
# a symbolic link to a directory not made yet inside it, followed wherever it stands on the path (a write
# through "link/" would make the link's target)
ln -s "$WORK/xdg/xtrain/new" "$WORK/new-link"
mkdir -p "$WORK/sub"
ln -s "$WORK/xdg/xtrain/nd2" "$WORK/sub/dl"
for out in "$WORK/new-link/" "$WORK/new-link/m" "$WORK/sub/dl/x/y"; do
  XDG_CACHE_HOME="$WORK/xdg" expect_export 2 "usage error: --out .* is inside the token cache directory .*xdg/xtrain " \
    "$WORK/a.ckpt" --out "$out" "${TOK[@]}"
done
# and to a cache directory not made yet
ln -s "$WORK/xdg2/xtrain" "$WORK/later-link"
XDG_CACHE_HOME="$WORK/xdg2" expect_export 2 "usage error: --out .*later-link/ is the token cache directory .*xdg2/xtrain " \
  "$WORK/a.ckpt" --out "$WORK/later-link/" "${TOK[@]}"
[[ ! -e "$WORK/xdg2" ]] || fail "--out into a cache directory not made yet wrote $(cd "$WORK/xdg2" && find .)"
[[ $(cd "$WORK/xdg/xtrain" && find . | sort | tr '\n' ' ') == ". ./models " ]] \
  || fail "--out into the cache directory wrote $(cd "$WORK/xdg/xtrain" && find .)"
XDG_CACHE_HOME="$WORK/xdg" "$EXPORT" "$WORK/a.ckpt" --out "$WORK/xdg/models" "${TOK[@]}" > "$WORK/x.log" 2>&1 \
  && [[ -s "$WORK/xdg/models/model.safetensors" ]] && echo "ok   --out beside the cache directory" \
  || fail "--out beside the cache directory: $(cat "$WORK/x.log")"
# spelt through the cache: only the directory reached is made, nothing in the cache on the way
XDG_CACHE_HOME="$WORK/xdg" "$EXPORT" "$WORK/a.ckpt" --out "$WORK/xdg/xtrain/nx/../../side" "${TOK[@]}" > "$WORK/x.log" 2>&1 \
  && [[ -s "$WORK/xdg/side/model.safetensors" ]] || fail "--out beside the cache, spelt through it: $(cat "$WORK/x.log")"
[[ $(cd "$WORK/xdg/xtrain" && find . | sort | tr '\n' ' ') == ". ./models " ]] \
  && echo "ok   --out beside the cache directory, spelt through it, made nothing in it" \
  || fail "--out cache/nx/../../side made $(cd "$WORK/xdg/xtrain" && find .)"
expect_export 2 "usage error: input .*a.ckpt is also an output" "$WORK/a.ckpt" --out "$WORK/d2" "${TOK[@]}" --registry "$WORK/a.ckpt"
expect_export 2 "usage error: --registry .* is also the export's" "$WORK/a.ckpt" --out "$WORK/d2" "${TOK[@]}" --registry "$WORK/d2/config.json"
expect_export 2 "usage error: --registry .* is also the export's --out directory" "$WORK/a.ckpt" --out "$WORK/d9" "${TOK[@]}" \
  --registry "$WORK/d9" --name d9
[[ ! -e "$WORK/d9" ]] || fail "a refused export created its --out"
expect_export 2 "usage error: --vocab-bpe was given an empty value" "$WORK/a.ckpt" --out "$WORK/d9" --vocab-bpe ""
expect_export 2 "usage error: --encoder-json was given an empty value" "$WORK/a.ckpt" --out "$WORK/d9" --encoder-json ""
[[ ! -e "$WORK/d9" ]] || fail "a refused export created its --out"

# 8. registry: concurrent exports all recorded (flock); a bad registry refused before the model is
# written; names from the normalised path, no control characters; an existing name needs --replace
pids=()
for i in 1 2 3 4 5 6; do
  "$EXPORT" "$WORK/a.ckpt" --out "$WORK/c$i/" "${TOK[@]}" --registry "$WORK/creg.json" > "$WORK/c$i.log" 2>&1 & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a concurrent export failed"; done
n=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["models"]))' "$WORK/creg.json")
[[ $n -eq 6 ]] || { cat "$WORK/creg.json"; fail "6 concurrent exports recorded $n entries"; }
python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["models"]; assert sorted(m)==["c%d"%i for i in range(1,7)], m' \
  "$WORK/creg.json" || fail "names of exports to DIR/ are not the directory names"
echo "ok   6 concurrent exports: 6 entries c1..c6"
echo '[1, 2]' > "$WORK/badreg.json"
expect_export 1 "registry .*badreg.json: expected" "$WORK/a.ckpt" --out "$WORK/br" "${TOK[@]}" --registry "$WORK/badreg.json"
[[ ! -e "$WORK/br/model.safetensors" ]] || fail "a bad registry left an exported model"
expect_export 2 "already has an entry c1 (give --replace" "$WORK/a.ckpt" --out "$WORK/c1" "${TOK[@]}" --registry "$WORK/creg.json"
"$EXPORT" "$WORK/a.ckpt" --out "$WORK/c1" "${TOK[@]}" --registry "$WORK/creg.json" --replace | grep -q "c1 replaced" \
  || fail "--replace"
expect_export 2 "control characters" "$WORK/a.ckpt" --out "$WORK/cc" "${TOK[@]}" --registry "$WORK/creg.json" --name $'a\nb'
echo '{"models": {"bad": {"md5": 5}}}' > "$WORK/typereg.json"
expect_export 1 "registry .*typereg.json: entry bad: " --verify bad --registry "$WORK/typereg.json" "$WORK/e1"
# an entry of a layout no export writes is refused by name, not re-exported as hf (whose digests it holds here)
python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))["models"]["tiny"]; e["layout"] = "gguf"
json.dump({"models": {"odd": e}}, open(sys.argv[2], "w"))' "$WORK/reg.json" "$WORK/layoutreg.json"
expect_export 1 "registry .*layoutreg.json: entry odd: unknown layout 'gguf' (known: hf, xtrain)" \
  --verify odd --registry "$WORK/layoutreg.json" "$WORK/a.ckpt"

# 9. re-export over an older export; symlinks in DIR are refused
"$EXPORT" "$WORK/g.ckpt" --out "$WORK/re" "${TOK[@]}" > /dev/null || fail "export of the GQA model"
# a re-export refused before writing (here: merges.txt cannot be replaced) leaves the previous export
# as it was (all or nothing; tests/integration/test_export_atomic.sh fails one midway)
cp -r "$WORK/re" "$WORK/re_int"
rm "$WORK/re_int/merges.txt" && mkdir "$WORK/re_int/merges.txt"
expect_export 1 "merges.txt: exists and is not a regular file" "$WORK/a.ckpt" --out "$WORK/re_int" "${TOK[@]}"
cmp "$WORK/re/model.safetensors" "$WORK/re_int/model.safetensors" || fail "a refused re-export changed the model"
cmp "$WORK/re/config.json" "$WORK/re_int/config.json" || fail "a refused re-export changed config.json"
"$EXPORT" "$WORK/a.ckpt" --out "$WORK/re" "${TOK[@]}" > /dev/null || fail "re-export into an older export"
cmp "$WORK/e1/model.safetensors" "$WORK/re/model.safetensors" || fail "re-export: model.safetensors"
cmp "$WORK/e1/config.json" "$WORK/re/config.json" || fail "re-export: config.json"
mkdir -p "$WORK/osl"
echo precious > "$WORK/precious.txt"
ln -s "$WORK/precious.txt" "$WORK/osl/model.safetensors"
expect_export 1 "osl/model.safetensors: is a symlink; not writing through it" "$WORK/a.ckpt" --out "$WORK/osl" "${TOK[@]}"
[[ $(cat "$WORK/precious.txt") == precious && ! -e "$WORK/osl/config.json" ]] || fail "export wrote through a symlink"
# a --name the registry (JSON, UTF-8) cannot hold is refused before anything is written
expect_export 2 "usage error: --name must be valid UTF-8" "$WORK/a.ckpt" --out "$WORK/badname" --registry "$WORK/reg.json" --name $'bad\xff' "${TOK[@]}"
[[ ! -e "$WORK/badname" ]] || fail "a refused --name left an export"
# another user's symlink on the way to --out or --registry (nobody's link in a sticky directory to a
# root-only directory): nothing in that directory is removed, created or written (root only)
if [[ $(id -u) -eq 0 ]] && command -v runuser > /dev/null; then
  chmod o+x "$WORK" && mkdir -m 1777 "$WORK/sticky" && mkdir -m 700 "$WORK/rootonly"
  echo precious > "$WORK/rootonly/model.safetensors"
  runuser -u nobody -- ln -s "$WORK/rootonly" "$WORK/sticky/out"
  expect_export 1 "sticky/out: is a symlink owned by uid [0-9]*, neither this user" "$WORK/a.ckpt" --out "$WORK/sticky/out" "${TOK[@]}"
  expect_export 1 "sticky/out is a symlink owned by uid [0-9]*, neither this user" "$WORK/a.ckpt" --out "$WORK/sticky/out/new/deeper" "${TOK[@]}"
  expect_export 1 "sticky/out is a symlink owned by uid [0-9]*, neither this user" "$WORK/a.ckpt" --out "$WORK/ok_out" \
    --registry "$WORK/sticky/out/regdir/r.json" "${TOK[@]}"
  [[ $(cat "$WORK/rootonly/model.safetensors") == precious && $(ls "$WORK/rootonly") == model.safetensors ]] \
    || fail "export touched a directory behind nobody's symlink: $(ls "$WORK/rootonly")"
else
  echo "skip exports through another user's symlink: needs root (runuser -u nobody)"
fi

# 10. inputs that are not regular files are refused at once; stdout write errors are exit 1
mkfifo "$WORK/fifo"
expect_export 1 "fifo: cannot read: not a regular file" "$WORK/fifo" --out "$WORK/ff" "${TOK[@]}"
if [[ -w /dev/full ]]; then
  rc=0
  "$EXPORT" "$WORK/a.ckpt" --out "$WORK/full" "${TOK[@]}" > /dev/full 2> "$WORK/full.log" || rc=$?
  [[ $rc -eq 1 ]] || fail ">/dev/full: exit $rc"
  one_line "$WORK/full.log" "cannot write the standard output"
fi
xt_finish
