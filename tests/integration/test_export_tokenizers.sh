#!/usr/bin/env bash
# Every tokenizer xtrain trains with goes into its export: for GPT-2's files, the tiktoken encodings
# (r50k_base, cl100k_base, llama3), a tokenizer.json (Qwen2.5) and a SentencePiece Unigram model, a tiny
# Llama trained 2 steps, exported: the directory holds tokenizer.json, tokenizer_config.json and
# special_tokens_map.json (+ tokenizer.model for SentencePiece), config.json and generation_config.json
# carry the eos id; xtrain_generate --model DIR with no tokenizer option gives the same greedy ids as
# the checkpoint with the run's options; --init-from DIR with no tokenizer option trains a step with
# the directory's tokenizer (its fingerprint is the model's); a tokenizer option that disagrees is one
# line naming both tokenizers. The ids of each exported tokenizer.json against the reference vectors
# are checked by tokenizer_export_vectors. Kinds whose files are absent are skipped; 77 when none ran.
source "$(dirname "$0")/common.sh"
xt_data
EXPORT="${XTRAIN_BIN_DIR}/xtrain_export"
GEN="${XTRAIN_BIN_DIR}/xtrain_generate"
dd="${XTRAIN_DATA_DIR:-}"
vec="$(dirname "$0")/../vectors"
LLAMA=(--arch llama --dim 32 --heads 4 --kv-heads 2 --layers 2 --seq 32 --ffn 48 --batch 4 --val-every 0 --log-every 10)
ran=0
check_kind() {  # check_kind NAME FILE-THAT-MUST-EXIST TOKENIZER-OPTIONS...
  local name=$1 need=$2; shift 2
  local tok=("$@") d="$WORK/$1"
  d="$WORK/$name"
  if [[ ! -e $need ]]; then echo "skip $name: $need absent"; return; fi
  mkdir -p "$d"
  "$XT" --data "$WORK/corpus.txt" "${tok[@]}" "${LLAMA[@]}" --steps 2 --ckpt "$d/a.ckpt" > "$d/train.log" 2>&1 ||
    { cat "$d/train.log"; fatal "$name: training"; }
  "$EXPORT" "$d/a.ckpt" --out "$d/e" "${tok[@]}" > "$d/export.log" 2>&1 || { cat "$d/export.log"; fatal "$name: export"; }
  for f in tokenizer.json tokenizer_config.json special_tokens_map.json generation_config.json; do
    [[ -s "$d/e/$f" ]] || fail "$name: no $f"
  done
  python3 - "$d/e" <<'PY' || fail "$name: config files"
import json, sys
d = sys.argv[1]
c, g = json.load(open(d + "/config.json")), json.load(open(d + "/generation_config.json"))
t = json.load(open(d + "/tokenizer_config.json"))
assert t["tokenizer_class"] == "PreTrainedTokenizerFast" and t["eos_token"], t
assert c["eos_token_id"] == g["eos_token_id"], (c, g)
vocab = json.load(open(d + "/tokenizer.json"))["model"]["vocab"]
eos = t["eos_token"]
added = {a["content"]: a["id"] for a in json.load(open(d + "/tokenizer.json"))["added_tokens"]}
assert added.get(eos, -1) == c["eos_token_id"], (eos, c["eos_token_id"])
PY
  gen=(--prompt "The jury said 1234 <|endoftext|> héllo" --temperature 0 --max-new-tokens 20 --ignore-eos --print-ids)
  "$GEN" --ckpt "$d/a.ckpt" "${tok[@]}" "${gen[@]}" > "$d/ckpt.ids" 2> "$d/gen1.log" || { cat "$d/gen1.log"; fail "$name: generate from the checkpoint"; }
  "$GEN" --model "$d/e" "${gen[@]}" > "$d/export.ids" 2> "$d/gen2.log" || { cat "$d/gen2.log"; fail "$name: generate from the export, no tokenizer option"; }
  cmp "$d/ckpt.ids" "$d/export.ids" || fail "$name: greedy ids from the checkpoint and from the export (its own tokenizer) differ"
  printf '{"context": "The jury said", "choices": ["it was fine", "the cat sat"], "answer": 0}\n' > "$d/mc.jsonl"
  "${XTRAIN_BIN_DIR}/xtrain_eval" --model "$d/e" --mc "$d/mc.jsonl" > /dev/null 2> "$d/eval.log" ||
    { cat "$d/eval.log"; fail "$name: xtrain_eval --model with the directory's tokenizer, no tokenizer option"; }
  # --init-from with no tokenizer option: the directory's tokenizer, whose fingerprint is the model's
  "$XT" --data "$WORK/corpus.txt" --init-from "$d/e" --steps 1 --batch 4 --val-every 0 --ckpt "$d/b.ckpt" > "$d/init.log" 2>&1 ||
    { cat "$d/init.log"; fail "$name: --init-from with the directory's tokenizer"; }
  grep -q "^init   | tokenizer from $d/e" "$d/init.log" || { cat "$d/init.log"; fail "$name: no 'tokenizer from' line"; }
  # and that checkpoint resumes with the run's original options (the same fingerprint)
  "$GEN" --ckpt "$d/b.ckpt" "${tok[@]}" --prompt "The" --max-new-tokens 2 > /dev/null 2> "$d/gen3.log" ||
    { cat "$d/gen3.log"; fail "$name: the --init-from checkpoint with the original tokenizer options"; }
  echo "ok   $name: $(sed -n 's/^tokenizer | //p' "$d/export.log")"
  ran=$((ran + 1))
}
check_kind gpt2 "${TOK[1]}" "${TOK[@]}"
check_kind r50k_base "$dd/tokenizers/r50k_base.tiktoken" --tokenizer r50k_base
check_kind cl100k_base "$dd/tokenizers/cl100k_base.tiktoken" --tokenizer cl100k_base
check_kind llama3 "$dd/tokenizers/llama3.tiktoken" --tokenizer llama3
check_kind qwen2_5 "$dd/tokenizers/qwen2_5/tokenizer.json" --tokenizer-json "$dd/tokenizers/qwen2_5/tokenizer.json"
check_kind spm_unigram "$vec/spm_unigram.model" --tokenizer-model "$vec/spm_unigram.model"

# a tokenizer option that disagrees with the directory's: one line naming both and the option to drop
if [[ -d "$WORK/cl100k_base/e" ]]; then
  rc=0; "$GEN" --model "$WORK/cl100k_base/e" "${TOK[@]}" --prompt x > /dev/null 2> "$WORK/dis.log" || rc=$?
  [[ $rc -eq 2 && $(wc -l < "$WORK/dis.log") -eq 1 ]] || { cat "$WORK/dis.log"; fail "disagreeing option: exit $rc"; }
  grep -q "was trained with tiktoken cl100k_base (fingerprint [0-9a-f]\{16\}, its config.json); the tokenizer options give GPT-2 BPE .*: drop the tokenizer options" "$WORK/dis.log" ||
    { cat "$WORK/dis.log"; fail "disagreeing option: message"; }
  echo "ok   a disagreeing tokenizer option: $(cat "$WORK/dis.log")"
fi
# a SentencePiece model that tokenizers cannot reproduce (nmt_nfkc normalizer): refused naming it
if [[ -e "$vec/spm_bpe.model" ]]; then
  "$XT" --data "$WORK/corpus.txt" --tokenizer-model "$vec/spm_bpe.model" "${LLAMA[@]}" --steps 1 --ckpt "$WORK/bpe.ckpt" > "$WORK/bpe.log" 2>&1 ||
    { cat "$WORK/bpe.log"; fatal "training with spm_bpe"; }
  rc=0; "$EXPORT" "$WORK/bpe.ckpt" --out "$WORK/e_bpe" --tokenizer-model "$vec/spm_bpe.model" > "$WORK/ebpe.log" 2>&1 || rc=$?
  [[ $rc -eq 1 && ! -e "$WORK/e_bpe/model.safetensors" ]] || { cat "$WORK/ebpe.log"; fail "spm_bpe export: exit $rc"; }
  grep -q "cannot be exported as a tokenizer.json that gives its ids: .*BPE model" "$WORK/ebpe.log" || { cat "$WORK/ebpe.log"; fail "spm_bpe message"; }
  echo "ok   refused: $(grep -m1 "cannot be exported" "$WORK/ebpe.log")"
fi
[[ $ran -gt 0 ]] || exit 77
xt_finish
