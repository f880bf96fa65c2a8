#!/usr/bin/env bash
# The data formats users bring train bitwise what the text trains (world 2 under mpirun, loss lines
# compared): llm.c shards written by xtrain_tokenize --shard-tokens, nanoGPT's raw uint16 file (the
# shards' ids without their headers) and JSON lines, plain and zstd-compressed, holding the same
# documents, tokenized in memory (--no-cache) and through a token cache, cold then warm (the second
# start maps the cache, tokenizing nothing); --val-data names held-out files.
source "$(dirname "$0")/common.sh"
xt_data
mkdir "$WORK/docs" "$WORK/shards" "$WORK/jsonl"
split -n l/4 -d --additional-suffix=.txt "$WORK/corpus.txt" "$WORK/docs/doc-"
ARGS=("${TOK[@]}" "${TINY[@]}" --steps 10)

run() {  # run NAME DATA [args]: world 2, metrics in NAME.jsonl; --no-cache unless args name --cache-dir
  local name=$1 data=$2 cache=(--no-cache)
  shift 2
  [[ " $* " == *" --cache-dir "* ]] && cache=()
  xt_run_ok "$name" mpi 2 "${ARGS[@]}" "${cache[@]}" --data "$data" --metrics "$WORK/$name.jsonl" "$@"
}

run text "$WORK/docs"
# text -> llm.c shards (prepared once) -> training
"$XTRAIN_BIN_DIR/xtrain_tokenize" "${TOK[@]}" --input "$WORK/docs" --shard-tokens 40000 --output "$WORK/shards/corpus" \
  > "$WORK/tok.out" || fatal "xtrain_tokenize --shard-tokens"
cat "$WORK/tok.out"
check "several shards written" test -s "$WORK/shards/corpus_000000.bin" -a -s "$WORK/shards/corpus_000001.bin"
check "llm.c's GPT-2 header: magic 20240520, version 1" \
  test "$(od -An -t d4 -N 8 "$WORK/shards/corpus_000000.bin" | tr -s ' ')" == " 20240520 1"
run llmc "$WORK/shards"
check "llm.c shards train bitwise what the text trains" same_losses text.jsonl llmc.jsonl 1 10
# nanoGPT's train.bin: the same ids, uint16, no header
for f in "$WORK"/shards/corpus_*.bin; do tail -c +1025 "$f"; done > "$WORK/train.bin"
run nanogpt "$WORK/train.bin" --data-format nanogpt
check "a nanoGPT train.bin trains bitwise what the text trains" same_losses text.jsonl nanogpt.jsonl 1 10
# JSON lines: one document (one text file) per line
python3 - "$WORK/docs" "$WORK/jsonl/corpus.jsonl" <<'PY'
import json, pathlib, sys
docs = sorted(pathlib.Path(sys.argv[1]).iterdir())
with open(sys.argv[2], "w") as out:
    for d in docs:
        out.write(json.dumps({"id": d.name, "text": d.read_bytes().decode("utf-8")}) + "\n")
PY
run jsonl "$WORK/jsonl/corpus.jsonl"
check "JSON lines train bitwise what the text trains" same_losses text.jsonl jsonl.jsonl 1 10
zstd -q "$WORK/jsonl/corpus.jsonl" -o "$WORK/corpus.jsonl.zst"
run zst "$WORK/corpus.jsonl.zst"
check "zstd-compressed JSON lines train the same" same_losses text.jsonl zst.jsonl 1 10
sed 's/"text"/"body"/' "$WORK/jsonl/corpus.jsonl" > "$WORK/body.jsonl"
run field "$WORK/body.jsonl" --jsonl-field body
check "--jsonl-field names the field" same_losses text.jsonl field.jsonl 1 10
# JSON lines through the token cache: the cold start tokenizes on one rank and writes the cache, the
# warm one maps it; both train bitwise what the text trains
for kind in jsonl zst; do
  data=$WORK/jsonl/corpus.jsonl
  [[ $kind == zst ]] && data=$WORK/corpus.jsonl.zst
  run "$kind-cold" "$data" --cache-dir "$WORK/cache-$kind"
  run "$kind-warm" "$data" --cache-dir "$WORK/cache-$kind"
  grep '^cache' "$WORK/$kind-cold.log" "$WORK/$kind-warm.log"
  check "$kind, cold cache: bitwise the text's losses" same_losses text.jsonl "$kind-cold.jsonl" 1 10
  check "$kind, cold cache: tokenized once, on one rank" grep -q "1 JSON lines file, .* | tokenized now: 1 on 1 rank |" "$WORK/$kind-cold.log"
  check "$kind, cold cache: one cache, named by content" test "$(compgen -G "$WORK/cache-$kind/[0-9a-f]*-[0-9a-f]*.tokcache" | wc -l)" == 1
  check "$kind, warm cache: bitwise the text's losses" same_losses text.jsonl "$kind-warm.jsonl" 1 10
  check "$kind, warm cache: the cache is reused, nothing tokenized" grep -q "tokenized now: none | caches reused: 1 (1 node)" "$WORK/$kind-warm.log"
  check "$kind, warm cache: no document parsed" bash -c "! grep -q '^jsonl  |' '$WORK/$kind-warm.log'"
done

# --val-data: the held-out files replace the tail of --data
run val "$WORK/shards" --val-every 5 --val-data "$WORK/docs/doc-03.txt" --val-seqs 4
check "--val-data: validation lines printed" grep -q '"val_loss"' "$WORK/val.jsonl"
check "--val-data: training on all of --data trains what it trains without validation" same_losses llmc.jsonl val.jsonl 1 10

xt_finish
