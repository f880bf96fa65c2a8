#!/usr/bin/env bash
# bench/serving_gpu.sh — the serving loop on a machine with a GPU, torch and transformers, for the
# default GPT-2 model and two Llamas (grouped-query with its own head; tied): train a small model,
# export it twice (byte-identical, md5 against the registry), load it with transformers'
# GPT2LMHeadModel / LlamaForCausalLM, compare fp32 logits (4 prompts), compare greedy generation token by
# token between transformers, xtrain CUDA and xtrain CPU (5 prompts x 64 tokens); import randomly
# initialised transformers models (GPT-2; Llama with grouped-query attention, untied) into xtrain and
# compare logits, then time greedy generation against
# transformers' generate at batch 1 and 16 on a GPT-2 124M-shaped model (xtrain with and without the
# decoding step's CUDA graph, which must give the same tokens) and print the time to the first token
# (xtrain_generate --timing --repeat 5, batch 1, bf16). Then the tokenizers of exports: a GPT-2 and
# Llamas trained TOK_STEPS steps with GPT-2's BPE, llama3, cl100k_base, Qwen2.5's tokenizer.json and a
# SentencePiece Unigram model (tests/vectors/spm_unigram.model), each exported: AutoTokenizer loads the
# directory, its ids equal xtrain_tokenize's on the texts of tests/vectors/make_tokenizer_vectors.py
# (Unicode, whitespace runs, digits, special tokens) and the tokenizer's own bos/eos in text, and greedy
# text through AutoTokenizer + the model equals xtrain_generate --model DIR's (no tokenizer option).
# Exits non-zero at the first failed check. docs/serving.md records a run.
#
# Usage: bench/serving_gpu.sh [all | tokenizers]   (tokenizers: only the tokenizer checks)
#        (env: BIN=build-gpu DATA=data OUT=<tmp> STEPS=300 LLAMA_TIED_STEPS=100 TOK_STEPS=60
#         PY=python3 NEW=64 SPEED_NEW=128; ONLY="NAME ...": only these tokenizer checks, of gpt2 llama_gpt2
#         llama_llama3 llama_cl100k llama_qwen2_5 llama_spm_unigram; SKIP_HF=1 DEVICE=cpu: a dry run, BIN=build)
set -euo pipefail
source "$(dirname "$0")/common.sh" && xt_help "$@"  # -h/--help: the header comment above

MODE=${1:-all}
[[ $MODE == all || $MODE == tokenizers ]] || { echo "usage: bench/serving_gpu.sh [all | tokenizers]" >&2; exit 2; }
DATA=${DATA:-data}
TOK_STEPS=${TOK_STEPS:-60}
OUT=${OUT:-$(mktemp -d)}
STEPS=${STEPS:-300}
LLAMA_TIED_STEPS=${LLAMA_TIED_STEPS:-100}
PY=${PY:-python3}
NEW=${NEW:-64}
SPEED_NEW=${SPEED_NEW:-128}
SKIP_HF=${SKIP_HF:-0}
DEVICE=${DEVICE:-cuda}  # cpu: a dry run of the xtrain parts on a machine without a GPU
BIN=${BIN:-$([[ $DEVICE == cpu ]] && echo build || echo build-gpu)}
mkdir -p "$OUT"
tok=(--encoder-json "$DATA/gpt2/encoder.json" --vocab-bpe "$DATA/gpt2/vocab.bpe")
hf() { "$PY" bench/hf_check.py "$@"; }
say() { printf 'serving: %s\n' "$*"; }
fail() { printf 'serving: FAILED: %s\n' "$*" >&2; exit 1; }
gen() { "$BIN/xtrain_generate" "${tok[@]}" "$@"; }

# prompts as token ids, one line each
prompts=("The jury said" "It was a cold morning in" "In the beginning" "The president of the United States"
         "She opened the door and")
: >"$OUT/ids.txt"
for p in "${prompts[@]}"; do "$BIN/xtrain_tokenize" "${tok[@]}" --print-ids "$p" >>"$OUT/ids.txt"; done

# dump_logits MODEL_DIR PREFIX: xtrain $DEVICE fp32 logits of the first 4 prompts -> PREFIX{0..3}.f32
dump_logits() {
  local k files=()
  for k in 0 1 2 3; do
    gen --model "$1" --device "$DEVICE" --dtype fp32 --prompt-ids "$(sed -n "$((k + 1))p" "$OUT/ids.txt")" \
      --max-new-tokens 0 --dump-logits "$2$k.f32" >/dev/null
    files+=("$2$k.f32")
  done
  head -4 "$OUT/ids.txt" >"$OUT/ids4.txt"
  [[ "$SKIP_HF" == 1 ]] || hf logits --model "$1" --ids "$OUT/ids4.txt" --xtrain-logits "${files[@]}" --tol 1e-4
}

# check_trained NAME STEPS TRAIN_OPTIONS...: a model trained STEPS steps, exported twice (byte-identical,
# verified against the registry), loaded by transformers, its fp32 logits against xtrain's, and greedy
# generation token-identical across transformers, xtrain on $DEVICE and xtrain on cpu
check_trained() {
  local name=$1 steps=$2 m="$OUT/$1"
  shift 2
  say "$name: training $* for $steps steps on $DEVICE"
  mpirun --allow-run-as-root -np 1 "$BIN/xtrain_mpi" --device "$DEVICE" --data "$DATA/brown.txt" "${tok[@]}" "$@" \
    --steps "$steps" --val-every 0 --log-every 100 --ckpt "$m.ckpt" >"$m.train.log" 2>&1 ||
    { tail -5 "$m.train.log"; fail "$name: training"; }
  tail -2 "$m.train.log"
  "$BIN/xtrain_export" "$m.ckpt" "${tok[@]}" --out "$m" --registry "$OUT/registry.json" --name "$name" --replace
  "$BIN/xtrain_export" "$m.ckpt" "${tok[@]}" --out "$m.2"
  cmp "$m/model.safetensors" "$m.2/model.safetensors" || fail "$name: two exports differ"
  "$BIN/xtrain_export" --verify "$name" --registry "$OUT/registry.json" "$m.ckpt" "${tok[@]}"
  md5sum "$m/model.safetensors"

  [[ "$SKIP_HF" == 1 ]] || hf load --model "$m"
  if [[ "$SKIP_HF" == 1 ]]; then say "$name: logits: xtrain $DEVICE fp32 (transformers check skipped: SKIP_HF=1)"
  else say "$name: logits: transformers vs xtrain $DEVICE fp32"; fi
  dump_logits "$m" "$m.logits_"

  say "$name: greedy generation, ${#prompts[@]} prompts x $NEW tokens"
  : >"$m.greedy.dev" && : >"$m.greedy.cpu"
  while read -r ids; do
    gen --model "$m" --device "$DEVICE" --dtype fp32 --prompt-ids "$ids" --temperature 0 --ignore-eos \
      --max-new-tokens "$NEW" --print-ids >>"$m.greedy.dev" 2>/dev/null
    gen --model "$m" --device cpu --prompt-ids "$ids" --temperature 0 --ignore-eos \
      --max-new-tokens "$NEW" --print-ids >>"$m.greedy.cpu" 2>/dev/null
  done <"$OUT/ids.txt"
  cmp "$m.greedy.dev" "$m.greedy.cpu" || fail "$name: xtrain $DEVICE and cpu greedy tokens differ"
  if [[ "$SKIP_HF" != 1 ]]; then
    hf generate --model "$m" --ids "$OUT/ids.txt" --max-new-tokens "$NEW" --ignore-eos >"$m.greedy.hf"
    cmp "$m.greedy.dev" "$m.greedy.hf" || fail "$name: transformers and xtrain greedy tokens differ"
  fi
  local hf_greedy=" and transformers"
  [[ "$SKIP_HF" == 1 ]] && hf_greedy=" (transformers check skipped: SKIP_HF=1)"
  say "$name: greedy tokens identical across xtrain on $DEVICE, xtrain on cpu$hf_greedy: $(wc -w <"$m.greedy.dev") tokens, $(tr ' ' '\n' <"$m.greedy.dev" | sort -u | wc -l) distinct"
}

# check_tokenizer NAME ARCH TOKENIZER_OPTIONS...: a model of that tokenizer trained TOK_STEPS steps,
# exported; AutoTokenizer loads the directory; its ids equal xtrain's on the texts; greedy text through
# AutoTokenizer + the model equals xtrain_generate --model DIR's with no tokenizer option
check_tokenizer() {
  local name=$1 arch=$2 m="$OUT/tok_$1"
  shift 2
  [[ -z ${ONLY:-} || " $ONLY " == *" $name "* ]] || return 0
  say "tokenizer $name: $arch trained $TOK_STEPS steps with $*"
  mpirun --allow-run-as-root -np 1 "$BIN/xtrain_mpi" --device "$DEVICE" --data "$DATA/brown.txt" "$@" --arch "$arch" \
    --dim 128 --heads 4 --layers 2 --seq 128 --batch 8 --steps "$TOK_STEPS" --val-every 0 --log-every 100 \
    --ckpt "$m.ckpt" >"$m.train.log" 2>&1 || { tail -5 "$m.train.log"; fail "$name: training"; }
  "$BIN/xtrain_export" "$m.ckpt" "$@" --out "$m" | grep '^tokenizer |' || fail "$name: export"
  # the texts: the reference vectors' (one home: make_tokenizer_vectors.py) and the tokenizer's own
  # bos/eos in text
  "$PY" - "$m" "$m.texts.json" <<'PY'
import json, sys
sys.path.insert(0, "tests/vectors")
from make_tokenizer_vectors import HARD_CASES
d, out = sys.argv[1], sys.argv[2]
cfg = json.load(open(d + "/tokenizer_config.json"))
texts = list(HARD_CASES)
for role in ("bos_token", "eos_token"):
    if cfg.get(role):
        texts += [cfg[role], f"Hello{cfg[role]}world", f"end. {cfg[role]}\n\nNext"]
json.dump(texts, open(out, "w"))
json.dump(["The jury said", "It was a cold morning in", "1234 5678 plus  3", "Ünïcödé café and 中文"],
          open(out.replace("texts", "prompts"), "w"))
PY
  "$BIN/xtrain_tokenize" "$@" --print-ids-of "$m.texts.json" >"$m.xtrain_ids" || fail "$name: xtrain_tokenize"
  if [[ "$SKIP_HF" == 1 ]]; then
    "$BIN/xtrain_generate" --model "$m" --device "$DEVICE" --prompt "The jury said" --temperature 0 --max-new-tokens 8 \
      >/dev/null || fail "$name: xtrain_generate --model with the directory's tokenizer"
    say "tokenizer $name: transformers checks skipped (SKIP_HF=1)"
    return
  fi
  hf tokenizer --model "$m" --texts "$m.texts.json" --xtrain-ids "$m.xtrain_ids" || fail "$name: AutoTokenizer ids"
  hf text-generate --model "$m" --prompts "$m.prompts.json" --xtrain-generate "$BIN/xtrain_generate" \
    --xtrain-device "$DEVICE" --max-new-tokens 32 || fail "$name: greedy text"
}

# a GPT-2, and Llamas of GPT-2's BPE, llama3, cl100k_base, Qwen2.5's tokenizer.json, a SentencePiece Unigram model
tokenizer_checks() {
  check_tokenizer gpt2 gpt2 "${tok[@]}"
  check_tokenizer llama_gpt2 llama "${tok[@]}"
  check_tokenizer llama_llama3 llama --tokenizer llama3 --tokenizer-ranks "$DATA/tokenizers/llama3.tiktoken"
  check_tokenizer llama_cl100k llama --tokenizer cl100k_base --tokenizer-ranks "$DATA/tokenizers/cl100k_base.tiktoken"
  check_tokenizer llama_qwen2_5 llama --tokenizer-json "$DATA/tokenizers/qwen2_5/tokenizer.json"
  check_tokenizer llama_spm_unigram llama --tokenizer-model tests/vectors/spm_unigram.model
}

if [[ $MODE == tokenizers ]]; then
  tokenizer_checks
  say "all tokenizer checks passed ($OUT)"
  exit 0
fi

# the default GPT-2 model; Llamas (LlamaForCausalLM): grouped-query with an own head, and tied
check_trained gpt2 "$STEPS"
check_trained llama "$STEPS" --arch llama --kv-heads 2 --tie-embeddings false
check_trained llama_tied "$LLAMA_TIED_STEPS" --arch llama --tie-embeddings true --rope-theta 500000 --norm-eps 1e-6

# random transformers models imported into xtrain: GPT-2, and a Llama with grouped-query attention
# and its own head (transformers' LlamaConfig defaults otherwise)
if [[ "$SKIP_HF" != 1 ]]; then
  say "logits: random GPT2LMHeadModel saved by transformers, imported by xtrain"
  hf make-random --out "$OUT/hf_rand" --n-embd 96 --n-layer 3 --n-head 4 --n-positions 256 \
    --encoder-json "$DATA/gpt2/encoder.json" --vocab-bpe "$DATA/gpt2/vocab.bpe"
  dump_logits "$OUT/hf_rand" "$OUT/logits_random_"
  say "logits: random LlamaForCausalLM (GQA, untied) saved by transformers, imported by xtrain"
  hf make-random --arch llama --untied --out "$OUT/hf_rand_llama" --n-embd 96 --n-layer 3 --n-head 6 --n-kv-head 2 \
    --n-inner 160 --n-positions 256 --encoder-json "$DATA/gpt2/encoder.json" --vocab-bpe "$DATA/gpt2/vocab.bpe"
  dump_logits "$OUT/hf_rand_llama" "$OUT/logits_random_llama_"

  # speed: greedy generation on a GPT-2 124M-shaped random model, batch 1 and 16
  hf make-random --out "$OUT/hf_124m" --n-embd 768 --n-layer 12 --n-head 12 --n-positions 1024 \
    --encoder-json "$DATA/gpt2/encoder.json" --vocab-bpe "$DATA/gpt2/vocab.bpe"
  head -1 "$OUT/ids.txt" >"$OUT/ids1.txt"
  for b in 1 16; do
    for d in fp32 bf16; do
      for g in auto off; do  # the one-token step as a CUDA graph, and every kernel launched
        gen --model "$OUT/hf_124m" --device "$DEVICE" --dtype "$d" --cuda-graph "$g" --prompt-ids "$(cat "$OUT/ids1.txt")" \
          --temperature 0 --ignore-eos --max-new-tokens "$SPEED_NEW" --batch "$b" --print-ids >"$OUT/speed.$d.$b.$g" \
          2>"$OUT/speed.$d.$b.$g.err" || { cat "$OUT/speed.$d.$b.$g.err"; fail "generation, $d batch $b --cuda-graph $g"; }
        sed "s/^/xtrain $d batch $b --cuda-graph $g: /" "$OUT/speed.$d.$b.$g.err"
      done
      cmp -s "$OUT/speed.$d.$b.auto" "$OUT/speed.$d.$b.off" || fail "$d batch $b: tokens differ with and without the CUDA graph"
    done
    hf generate --model "$OUT/hf_124m" --ids "$OUT/ids1.txt" --max-new-tokens "$SPEED_NEW" --ignore-eos \
      --batch "$b" 2>&1 >/dev/null
  done
  # time to the first token: the cold start's phases, then 4 warm generations in the same process (batch 1, bf16)
  gen --model "$OUT/hf_124m" --device "$DEVICE" --dtype bf16 --prompt-ids "$(cat "$OUT/ids1.txt")" --temperature 0 \
    --ignore-eos --max-new-tokens "$SPEED_NEW" --print-ids --timing --repeat 5 >"$OUT/ttft.ids" 2>"$OUT/ttft.err" ||
    { cat "$OUT/ttft.err"; fail "--timing --repeat 5"; }
  cmp -s "$OUT/ttft.ids" "$OUT/speed.bf16.1.auto" || fail "--timing --repeat 5: tokens differ from the bf16 batch-1 run"
  grep -E '^(timing|repeat) \|' "$OUT/ttft.err" | sed 's/^/xtrain bf16 batch 1: /'
else
  say "transformers GPT-2 import and speed against transformers: skipped (SKIP_HF=1)"
fi
tokenizer_checks
say "all checks passed ($OUT)"
