#!/usr/bin/env bash
# Bad input in each data format (llm.c shards, nanoGPT raw files, JSON lines plain and zstd): world 2
# ends within seconds with one line naming the file (and line), the exit code of the error, and no
# output written (no metrics file, no checkpoint). The JSON lines cases run twice: tokenized in memory
# (--no-cache, the file streamed) and through the token cache (the bytes read whole, one rank
# tokenizing), where nothing may be left in the cache directory either.
source "$(dirname "$0")/common.sh"
xt_data
BOUND=30  # seconds for an error case; a hang in a collective would hit it
MAX_S=$((BOUND - 1))  # expect_cmd: ended in under BOUND s
ARGS=("${TOK[@]}" "${TINY[@]}" --steps 2 --metrics "$WORK/outputs/m.jsonl" --ckpt "$WORK/outputs/c.bin")
MODE=(--no-cache)  # how the data is read: --no-cache, or --cache-dir "$WORK/cache" (JSON lines below)
mkdir "$WORK/outputs" "$WORK/bad"

# expect NAME CODE PATTERN DATA [args]: world 2 ends with CODE in under BOUND s, its first rank line
# matches PATTERN (common.sh's expect_cmd), and $WORK/outputs and $WORK/cache hold no file (but the
# tokenizer's tables, written before the data is read: data/tokenizer_cache.h)
expect() {
  local name=$1 code=$2 pattern=$3 data=$4
  shift 4
  [[ ${MODE[0]} == --no-cache ]] || name="$name (cached)"
  expect_cmd "$name" "$code" "$pattern" "${MPIRUN[@]}" -np 2 "$XT" "${ARGS[@]}" "${MODE[@]}" --data "$data" "$@"
  local left
  left=$(ls -A "$WORK/outputs"; find "$WORK/cache" -type f ! -name '*.toktables' 2> /dev/null || true)
  [[ -z $left ]] || fail "$name: files written: ${left//$'\n'/ }"
  rm -rf "${WORK:?}/outputs"/*
}
# shard NAME MAGIC VERSION COUNT IDS-DTYPE IDS...: an llm.c shard written by Python as llm.c does
shard() {
  python3 - "$WORK/bad/$1" "$2" "$3" "$4" "$5" "${@:6}" <<'PY'
import struct, sys
path, magic, version, count, dtype = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
ids = [int(x) for x in sys.argv[6:]]
with open(path, "wb") as f:
    f.write(struct.pack("<256i", magic, version, count, *([0] * 253)))
    f.write(struct.pack("<%d%s" % (len(ids), dtype), *ids))
PY
}
ids=$(seq 1 400 | tr '\n' ' ')
shard ok.bin 20240520 1 400 H $ids
head -c 100 "$WORK/bad/ok.bin" > "$WORK/bad/header.bin"
expect "llm.c: truncated header" 1 "llm.c shard .*header.bin is truncated: 100 bytes" "$WORK/bad/header.bin"
head -c 1500 "$WORK/bad/ok.bin" > "$WORK/bad/cut.bin"
expect "llm.c: truncated ids" 1 "llm.c shard .*cut.bin is truncated: 1500 bytes, but its header says" "$WORK/bad/cut.bin"
shard version.bin 20240520 2 400 H $ids
expect "llm.c: wrong version" 1 "llm.c shard .*version.bin: version 2 with the GPT-2 magic" "$WORK/bad/version.bin"
shard magic.bin 20240521 1 400 H $ids
expect "llm.c: wrong magic (auto)" 2 "magic.bin: a .bin file without llm.c's magic" "$WORK/bad/magic.bin"
expect "llm.c: wrong magic (llmc)" 1 "llm.c shard .*magic.bin: magic 20240521 is not llm.c's" "$WORK/bad/magic.bin" --data-format llmc
shard vocab.bin 20240520 1 400 H $ids
python3 -c 'import sys; f=open(sys.argv[1],"r+b"); f.seek(1024+2*7); f.write((60000).to_bytes(2,"little"))' "$WORK/bad/vocab.bin"
expect "llm.c: id >= vocabulary" 1 "llm.c shard .*vocab.bin: token id 60000 at index 7 outside the vocabulary \[0, 50257\)" "$WORK/bad/vocab.bin"
shard llama.bin 20240801 7 401 I $ids 70000
expect "llm.c uint32: id >= vocabulary" 1 "llm.c shard .*llama.bin: token id 70000 at index 400 outside the vocabulary" "$WORK/bad/llama.bin"

tail -c +1025 "$WORK/bad/vocab.bin" > "$WORK/bad/train.bin"
expect "nanoGPT: id >= vocabulary" 1 "nanoGPT token file .*train.bin: token id 60000 at index 7" "$WORK/bad/train.bin" --data-format nanogpt
head -c 301 "$WORK/bad/train.bin" > "$WORK/bad/odd.bin"
expect "nanoGPT: odd size" 1 "nanoGPT token file .*odd.bin: 301 bytes, not a whole number of uint16 ids" "$WORK/bad/odd.bin" --data-format nanogpt

printf '{"text": "a"}\n{"text": "b"\n' > "$WORK/bad/notjson.jsonl"
python3 -c 'print("{\"text\": \"a\", \"x\": " + "[" * 300000 + "]" * 300000 + "}")' > "$WORK/bad/deep.jsonl"
head -c 1073741824 /dev/zero | zstd -q > "$WORK/bad/zeros.jsonl.zst"  # 1 GiB without a newline, ~30 KB compressed
printf '{"text": "a"}\n\n{"body": "b"}\n' > "$WORK/bad/nofield.jsonl"
printf '{"text": 7}\n' > "$WORK/bad/number.jsonl"
head -c 20000 "$WORK/corpus.txt" | python3 -c 'import json,sys; print(json.dumps({"text": sys.stdin.read()}))' \
  | zstd -q > "$WORK/bad/good.jsonl.zst"
size=$(stat -c %s "$WORK/bad/good.jsonl.zst")
{ head -c 20 "$WORK/bad/good.jsonl.zst"; head -c 64 /dev/zero | tr '\0' 'x'; tail -c +85 "$WORK/bad/good.jsonl.zst"; } > "$WORK/bad/corrupt.jsonl.zst"
head -c $((size / 2)) "$WORK/bad/good.jsonl.zst" > "$WORK/bad/cut.jsonl.zst"
for mode in no-cache cache; do
  MODE=(--no-cache)
  [[ $mode == cache ]] && MODE=(--cache-dir "$WORK/cache")
  expect "JSON lines: a line not JSON" 1 "notjson.jsonl:2: not valid JSON" "$WORK/bad/notjson.jsonl"
  expect "JSON lines: a line nested 300,000 deep" 1 "deep.jsonl:1: not valid JSON \(nested deeper than" "$WORK/bad/deep.jsonl"
  # where a quarter of the available memory is under 1 GiB, the file's size is refused before its line
  expect "JSON lines: a 1 GiB line in a small .zst" 1 \
    "zeros.jsonl.zst(:1: a line longer than 256 MiB|: decompresses to more than the JSON lines bound of [0-9]+ MiB)" \
    "$WORK/bad/zeros.jsonl.zst"
  expect "JSON lines: no text field" 1 "nofield.jsonl:3: no \"text\" field" "$WORK/bad/nofield.jsonl"
  expect "JSON lines: field not a string" 1 "number.jsonl:1: \"text\" is a number, not a string" "$WORK/bad/number.jsonl"
  expect "zstd: corrupt stream" 1 "corrupt.jsonl.zst: corrupt zstd stream" "$WORK/bad/corrupt.jsonl.zst"
  expect "zstd: truncated stream" 1 "cut.jsonl.zst: zstd stream ends mid-frame" "$WORK/bad/cut.jsonl.zst"
done
MODE=(--no-cache)
expect "--data-format unknown" 2 "--data-format csv: expected auto, text, llmc, nanogpt or jsonl" "$WORK/corpus.txt" --data-format csv

xt_finish
