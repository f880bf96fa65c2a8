#!/usr/bin/env bash
# Llama models through xtrain_export, --init-from and xtrain_generate --model, end to end, for an untied
# grouped-query model, a tied one and an untied one with --head-dim 16 != dim / heads (LlamaConfig's
# head_dim; also read from a config.json written by hand): the export is a LlamaForCausalLM directory
# (config.json and tensor names read independently); export -> --init-from (2 ranks) -> checkpoint -> export gives the same
# model.safetensors (bitwise round trip, the model options from config.json); xtrain_generate from the
# checkpoint and from its export gives the same logits (bitwise) and the same greedy tokens. Then the
# tokenizer fingerprint the export records: a same-size tokenizer with two merges swapped is refused by
# --model and --init-from with one line naming both fingerprints; a model trained with another tokenizer
# (tiktoken r50k, when its rank file is there) is refused with GPT-2's files and exports with its own.
source "$(dirname "$0")/common.sh"
xt_data
EXPORT="${XTRAIN_BIN_DIR}/xtrain_export"
GEN="${XTRAIN_BIN_DIR}/xtrain_generate"
LLAMA=(--arch llama --dim 32 --heads 4 --layers 2 --seq 32 --ffn 48 --norm-eps 1e-6 --rope-theta 500000 --batch 4 --val-every 0 --log-every 10)

# untied GQA, tied, and untied GQA with a head size other than dim / heads (LlamaConfig's head_dim 16: q_proj
# (64, 32), k/v_proj (32, 32), o_proj (32, 64))
for variant in untied tied head_dim16; do
  hs=8
  case $variant in
    untied) opts=(--kv-heads 2 --tie-embeddings false); kvh=2 ;;
    tied) opts=(--tie-embeddings true); kvh=4 ;;
    head_dim16) opts=(--kv-heads 2 --tie-embeddings false --head-dim 16); kvh=2; hs=16 ;;
  esac
  d="$WORK/$variant"
  mkdir -p "$d"
  "$XT" "${DATA[@]}" "${LLAMA[@]}" "${opts[@]}" --steps 3 --ckpt "$d/a.ckpt" > "$d/train.log" 2>&1 || { cat "$d/train.log"; fatal "$variant: training"; }
  "$EXPORT" "$d/a.ckpt" --out "$d/e1" "${TOK[@]}" > "$d/e1.log" || fatal "$variant: export"
  grep -q "layout hf" "$d/e1.log" || fail "$variant: a Llama exports in the hf layout, whatever its head size"
  # config.json and the safetensors header, read by the spec with the Python standard library
  python3 - "$d/e1" "$variant" "$kvh" "$hs" <<'PY'
import json, struct, sys
d, variant, kvh, hs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = json.load(open(d + "/config.json"))
assert c["architectures"] == ["LlamaForCausalLM"] and c["model_type"] == "llama", c
want = {"hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": kvh,
        "num_hidden_layers": 2, "head_dim": hs, "max_position_embeddings": 32, "vocab_size": 50257, "rms_norm_eps": 1e-6,
        "rope_theta": 500000.0, "tie_word_embeddings": variant == "tied", "hidden_act": "silu", "attention_bias": False,
        "mlp_bias": False, "torch_dtype": "float32", "bos_token_id": 50256, "eos_token_id": 50256}
for k, v in want.items():
    assert c[k] == v, (k, c[k], v)
assert len(c["xtrain_tokenizer_fingerprint"]) == 16
b = open(d + "/model.safetensors", "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
h.pop("__metadata__")
names = {"model.embed_tokens.weight", "model.norm.weight"} | ({"lm_head.weight"} if variant != "tied" else set())
for l in range(2):
    for n in ("input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
              "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
        names.add(f"model.layers.{l}.{n}.weight")
assert set(h) == names, set(h) ^ names
assert h["model.layers.1.self_attn.q_proj.weight"]["shape"] == [4 * hs, 32]  # (NH*head_dim, C)
assert h["model.layers.1.self_attn.k_proj.weight"]["shape"] == [kvh * hs, 32]  # (KVH*head_dim, C)
assert h["model.layers.1.self_attn.v_proj.weight"]["shape"] == [kvh * hs, 32]
assert h["model.layers.1.self_attn.o_proj.weight"]["shape"] == [32, 4 * hs]  # (C, NH*head_dim)
assert h["model.layers.0.mlp.gate_proj.weight"]["shape"] == [48, 32] and h["model.layers.0.mlp.down_proj.weight"]["shape"] == [32, 48]
print(f"{variant}: config.json and tensor names are LlamaForCausalLM's")
PY
  # round trip: --init-from on 2 ranks, a step that cannot move a weight (lr 1e-30, see test_export_tool.sh),
  # export again: the same bytes; the model options (the Llama ones included) come from config.json
  "${MPIRUN[@]}" -np 2 "$XT" "${DATA[@]}" --init-from "$d/e1" --steps 1 --batch 4 --lr 1e-30 --warmup 0 --weight-decay 0 \
    --val-every 0 --ckpt "$d/b.ckpt" > "$d/import.log" 2>&1 || { cat "$d/import.log"; fatal "$variant: --init-from"; }
  tied=$([[ $variant == tied ]] && echo 1 || echo 0)
  grep -q "V=50257 T=32 C=32 L=2 NH=4 KVH=$kvh HS=$hs F=48 arch=llama norm_eps=1e-06 rope_theta=500000 tied=$tied" "$d/import.log" ||
    { cat "$d/import.log"; fail "$variant: model options from config.json"; }
  grep -q "max parameter difference across 2 ranks: 0.000e+00" "$d/import.log" || { cat "$d/import.log"; fail "$variant: ranks differ"; }
  "$EXPORT" "$d/b.ckpt" --out "$d/e2" "${TOK[@]}" > /dev/null || fail "$variant: export after import"
  cmp "$d/e1/model.safetensors" "$d/e2/model.safetensors" || fail "$variant: export -> --init-from -> export changed the weights"
  cmp "$d/e1/config.json" "$d/e2/config.json" || fail "$variant: export -> --init-from -> export changed config.json"
  # generation: the checkpoint and its export give the same logits, bit for bit, and the same tokens
  gen=(--prompt "The jury said" --temperature 0 --max-new-tokens 40 --ignore-eos --print-ids)
  "$GEN" --ckpt "$d/a.ckpt" "${TOK[@]}" "${gen[@]}" --dump-logits "$d/ckpt.logits" > "$d/ckpt.ids" 2> "$d/gen1.log" ||
    { cat "$d/gen1.log"; fail "$variant: generate from the checkpoint"; }
  "$GEN" --model "$d/e1" "${gen[@]}" --dump-logits "$d/export.logits" > "$d/export.ids" 2> "$d/gen2.log" ||
    { cat "$d/gen2.log"; fail "$variant: generate from the export"; }
  cmp "$d/ckpt.logits" "$d/export.logits" || fail "$variant: logits from the checkpoint and from its export differ"
  cmp "$d/ckpt.ids" "$d/export.ids" || fail "$variant: greedy tokens from the checkpoint and from its export differ"
  [[ $(wc -w < "$d/ckpt.ids") -ge 40 ]] || fail "$variant: expected at least 40 token ids, got $(cat "$d/ckpt.ids")"
  if [[ $variant == head_dim16 ]]; then
    # a transformers-layout directory whose config.json is written by hand with LlamaConfig's fields
    # (head_dim among them, no fingerprint): xtrain_generate --model gives the checkpoint's logits
    mkdir "$d/by_hand"
    cp "$d/e1/model.safetensors" "$d/e1/vocab.json" "$d/e1/merges.txt" "$d/by_hand/"
    cat > "$d/by_hand/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 50257, "hidden_size": 32,
 "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 16, "max_position_embeddings": 32, "rms_norm_eps": 1e-06, "rope_theta": 500000.0,
 "tie_word_embeddings": false, "hidden_act": "silu", "torch_dtype": "float32"}
JSON
    "$GEN" --model "$d/by_hand" "${gen[@]}" --dump-logits "$d/hand.logits" > /dev/null 2> "$d/gen3.log" ||
      { cat "$d/gen3.log"; fail "$variant: generate from a config.json written by hand"; }
    cmp "$d/ckpt.logits" "$d/hand.logits" || fail "$variant: logits from the checkpoint and from the hand-written directory differ"
    echo "ok   $variant: a LlamaForCausalLM directory with head_dim 16 written by hand gives the checkpoint's logits"
  fi
  echo "ok   $variant: export -> --init-from -> export byte-identical; logits and 40 greedy tokens equal from checkpoint and export"
done

# The fingerprint: two merges swapped (same size, another tokenizer). In the export's own merges.txt
# (its tokenizer.json removed, so that --model reads the pair): xtrain_generate --model is refused naming
# the file; as the run's --vocab-bpe: --init-from is, naming both tokenizers and the options to drop.
d="$WORK/untied"
cp -r "$d/e1" "$WORK/e_tok"
rm "$WORK/e_tok/tokenizer.json"
{ head -n -2 "$d/e1/merges.txt"; tail -n 1 "$d/e1/merges.txt"; tail -n 2 "$d/e1/merges.txt" | head -n 1; } > "$WORK/swapped.bpe"
cp "$WORK/swapped.bpe" "$WORK/e_tok/merges.txt"
fp=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["xtrain_tokenizer_fingerprint"])' "$d/e1/config.json")
rc=0
"$GEN" --model "$WORK/e_tok" --prompt "The" --max-new-tokens 2 > /dev/null 2> "$WORK/tk.log" || rc=$?
[[ $rc -eq 1 ]] || { cat "$WORK/tk.log"; fail "--model with two merges swapped: exit $rc, expected 1"; }
one_line "$WORK/tk.log" "e_tok/vocab.json (fingerprint [0-9a-f]\{16\}) is not the tokenizer the model was trained with, GPT-2 BPE (fingerprint $fp, its config.json)"
cat "$WORK/tk.log"
rc=0
"$XT" --data "$WORK/corpus.txt" --encoder-json "${TOK[1]}" --vocab-bpe "$WORK/swapped.bpe" --init-from "$d/e1" --steps 1 --batch 4 \
  --val-every 0 > "$WORK/tk2.log" 2>&1 || rc=$?
[[ $rc -eq 2 ]] || { cat "$WORK/tk2.log"; fail "--init-from with two merges swapped: exit $rc, expected 2"; }
one_line "$WORK/tk2.log" "usage error: --init-from .*untied/e1 was trained with GPT-2 BPE (fingerprint $fp, its config.json); the tokenizer options give GPT-2 BPE .*swapped.bpe (fingerprint [0-9a-f]\{16\}): drop the tokenizer options"
cat "$WORK/tk2.log"

# A model trained with another tokenizer: exported with the default GPT-2 files, refused naming the options;
# with its own (--tokenizer r50k_base), its tokenizer.json replaces the GPT-2 pair of a previous export
ranks="${XTRAIN_DATA_DIR:-}/tokenizers/r50k_base.tiktoken"
if [[ -f "$ranks" ]]; then
  "$XT" --data "$WORK/corpus.txt" --tokenizer r50k_base --tokenizer-ranks "$ranks" "${LLAMA[@]}" --steps 1 --ckpt "$WORK/r.ckpt" \
    > "$WORK/r.log" 2>&1 || { cat "$WORK/r.log"; fatal "training with r50k_base"; }
  cp -r "$d/e1" "$WORK/e_r"  # over an export that has GPT-2's files: they go
  rc=0; "$EXPORT" "$WORK/r.ckpt" --out "$WORK/e_r" > "$WORK/er.log" 2>&1 || rc=$?
  [[ $rc -eq 2 ]] && grep -q "is not the one the model was trained with (.*): give the run's tokenizer options (--tokenizer NAME" "$WORK/er.log" ||
    { cat "$WORK/er.log"; fail "export of an r50k_base model with GPT-2's files: exit $rc"; }
  cmp "$d/e1/model.safetensors" "$WORK/e_r/model.safetensors" || fail "a refused export changed the directory"
  "$EXPORT" "$WORK/r.ckpt" --out "$WORK/e_r" --tokenizer r50k_base --tokenizer-ranks "$ranks" > "$WORK/er.log" || fail "export with --tokenizer r50k_base"
  grep -q "^tokenizer | tiktoken r50k_base (fingerprint [0-9a-f]\{16\}): tokenizer.json" "$WORK/er.log" || { cat "$WORK/er.log"; fail "tokenizer line"; }
  [[ ! -e "$WORK/e_r/vocab.json" && ! -e "$WORK/e_r/merges.txt" ]] || fail "GPT-2 files left next to a model of another tokenizer"
  "$GEN" --model "$WORK/e_r" --prompt "The" --max-new-tokens 2 > /dev/null 2>&1 || fail "generate from an export with its own tokenizer"
  echo "ok   a model of tiktoken r50k_base: refused with GPT-2's files; exported with its tokenizer.json, generates with no option"
else
  echo "skip the export of a model of another tokenizer: $ranks absent"
fi
xt_finish
