#!/usr/bin/env bash
# Training with a Hugging Face tokenizer.json whose ids pass 65,535 (Qwen2.5: 151,665 ids, its
# <|endoftext|> is 151643): two documents joined by the tokenizer's end-of-text id train on 2 ranks,
# the first loss is ln(V) of the whole vocabulary, and a second run that maps the token caches trains
# bitwise the same (a 16-bit cache would change the ids). Skipped (77) without
# data/tokenizers/qwen2_5/tokenizer.json (scripts/setup.sh --tokenizers).
source "$(dirname "$0")/common.sh"
xt_data
Q="${XTRAIN_DATA_DIR:-}/tokenizers/qwen2_5/tokenizer.json"
[[ -f "$Q" ]] || { echo "SKIP: $Q missing (scripts/setup.sh --tokenizers)"; exit 77; }

ids=$("$XTRAIN_BIN_DIR/xtrain_tokenize" --tokenizer-json "$Q" --print-ids "中文分词测试<|endoftext|>")
echo "ids: $ids"
check "ids above 65535, <|endoftext|> is 151643" python3 -c 'import sys; ids = list(map(int, sys.argv[1].split()))
assert max(ids[:-1]) > 65535 and ids[-1] == 151643, ids' "$ids"

mkdir "$WORK/docs"
head -c 40000 "$WORK/corpus.txt" > "$WORK/docs/a.txt"
{ tail -c 40000 "$WORK/corpus.txt"; printf '中文分词测试 日本語のテキスト\n'; } > "$WORK/docs/b.txt"
run() {  # run NAME: metrics in NAME.jsonl, the losses in NAME.losses
  xt_run_ok "$1" mpi 2 --tokenizer-json "$Q" "${TINY[@]}" --steps 6 --data "$WORK/docs" --metrics "$WORK/$1.jsonl"
  xt_losses "$WORK/$1.jsonl" > "$WORK/$1.losses"
}
run first
run cached
grep -E "^(model|data|cache)" "$WORK/first.log" || true
check "the model has Qwen2.5's 151665 ids" grep -q "V=151665 " "$WORK/first.log"
check "first loss is ln(151665) = 11.93 within 0.1" python3 -c 'import math, sys
loss = float(open(sys.argv[1]).readline().split()[1]); assert abs(loss - math.log(151665)) < 0.1, loss' "$WORK/first.losses"
check "a run from the token caches trains bitwise the same" diff -q "$WORK/first.losses" "$WORK/cached.losses"
check "6 steps trained" test "$(wc -l < "$WORK/first.losses")" = 6
xt_finish "all checks passed"
