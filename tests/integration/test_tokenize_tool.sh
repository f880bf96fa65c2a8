#!/usr/bin/env bash
# xtrain_tokenize with the GPT-2 files fetched by scripts/setup.sh (data/gpt2): ids of reference
# strings as tiktoken's "gpt2" encoding gives them (values from js-tiktoken, recorded in
# ../shared/data/gpt2/tokenizer_examples.json), decode round trip, exit codes, the --output checks.
# Runs without ../shared, so CI checks the tokenizer even where the fuller test_tokenizer is skipped.
set -euo pipefail
dd="${XTRAIN_DATA_DIR:-}"
[[ -f "$dd/gpt2/encoder.json" && -f "$dd/gpt2/vocab.bpe" ]] || { echo "SKIP: no data/gpt2 (run scripts/setup.sh)"; exit 77; }
TOOL="${XTRAIN_BIN_DIR:?}/xtrain_tokenize"
TOK=(--encoder-json "$dd/gpt2/encoder.json" --vocab-bpe "$dd/gpt2/vocab.bpe")
fails=0
check() {  # check TEXT EXPECTED_IDS
  local got
  got=$("$TOOL" "${TOK[@]}" --print-ids "$1")
  if [[ "$got" == "$2" ]]; then echo "ok   $(printf '%q' "$1") -> $got"; else echo "FAIL $(printf '%q' "$1"): got '$got', want '$2'"; fails=$((fails+1)); fi
}
check "Hello, world!" "15496 11 995 0"
check "The cat sat on the mat." "464 3797 3332 319 262 2603 13"
check "I can't wait to see you." "40 460 470 4043 284 766 345 13"
check "There are 42 apples." "1858 389 5433 22514 13"
check $'First line.\nSecond line.' "5962 1627 13 198 12211 1627 13"
check "<|endoftext|>" "50256"
# decode(encode(x)) == x for a multi-script string
text=$'caf\u00e9 \u6f22\u5b57 \U0001F600  spaces\n\n'
ids=$("$TOOL" "${TOK[@]}" --print-ids "$text")
back=$("$TOOL" "${TOK[@]}" --decode "$ids")
[[ "$back" == "${text%$'\n\n'}" || "$back"$'\n' == "$text" || "$back" == "$text" ]] && echo "ok   round trip of a multi-script string ($ids)" \
  || { echo "FAIL round trip: '$back'"; fails=$((fails+1)); }
# exit codes: 2 for usage errors, 1 for a missing file
rc=0; "$TOOL" --bogus > /dev/null 2>&1 || rc=$?; [[ $rc -eq 2 ]] || { echo "FAIL unknown option: exit $rc"; fails=$((fails+1)); }
rc=0; "$TOOL" --encoder-json /nonexistent --vocab-bpe "$dd/gpt2/vocab.bpe" --print-ids x > /dev/null 2>&1 || rc=$?
[[ $rc -eq 1 ]] || { echo "FAIL missing file: exit $rc"; fails=$((fails+1)); }
# outputs: never the input (same device and inode), never a file that is not a regular file
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
printf 'Hello world\n' > "$work/in.txt"; ln "$work/in.txt" "$work/link.txt"; mkfifo "$work/fifo"
rc=0; "$TOOL" "${TOK[@]}" --input "$work/in.txt" --output "" > /dev/null 2> "$work/err" || rc=$?
[[ $rc -eq 2 ]] && grep -q -- "--output was given an empty value" "$work/err" && echo "ok   --output \"\": usage error" \
  || { echo "FAIL --output \"\": exit $rc: $(cat "$work/err")"; fails=$((fails+1)); }
# a corpus: one machine-readable line on stdout, the tokenize progress (here only its total) on stderr
"$TOOL" "${TOK[@]}" --input "$work/in.txt" --output "$work/in.tokcache" > "$work/out" 2> "$work/err"
[[ $(wc -l < "$work/out") -eq 1 ]] && grep -q "^tokens=3 bytes=12 " "$work/out" \
  && grep -q "^tokenize $work/in.txt | 0.0 MB in " "$work/err" && echo "ok   --input: summary on stdout, progress on stderr" \
  || { echo "FAIL --input: stdout '$(cat "$work/out")', stderr '$(cat "$work/err")'"; fails=$((fails+1)); }
rc=0; "$TOOL" "${TOK[@]}" --input "$work/in.txt" --output "$work/link.txt" > /dev/null 2>&1 || rc=$?
[[ $rc -eq 2 && "$(cat "$work/in.txt")" == "Hello world" ]] && echo "ok   --output a hard link to --input: exit 2, input kept" \
  || { echo "FAIL --output a hard link to --input: exit $rc"; fails=$((fails+1)); }
rc=0; "$TOOL" "${TOK[@]}" --input "$work/in.txt" --output "$work/fifo" > /dev/null 2> "$work/err" || rc=$?
[[ $rc -eq 1 && -p "$work/fifo" ]] && grep -q "not a regular file" "$work/err" && echo "ok   --output a FIFO: exit 1, left alone" \
  || { echo "FAIL --output a FIFO: exit $rc: $(cat "$work/err")"; fails=$((fails+1)); }
# --output is checked before the tokenizer loads: never a tokenizer file, never a file that is not a
# token cache (the cache's own recognizer), and a missing directory fails before any tokenizing
cp "$dd/gpt2/encoder.json" "$work/e2.json"; cp "$dd/gpt2/vocab.bpe" "$work/v2.bpe"; printf 'notes\n' > "$work/notes.txt"
expect_out() {  # expect_out RC PATTERN NAME ARGS...: exit RC, stderr matching PATTERN, no tokenizing
  local want=$1 pattern=$2 name=$3 rc=0
  shift 3
  "$TOOL" "$@" > /dev/null 2> "$work/err" || rc=$?
  [[ $rc -eq $want ]] && grep -q -- "$pattern" "$work/err" && ! grep -q "^tokenize " "$work/err" \
    && echo "ok   $name: exit $rc: $(cat "$work/err")" || { echo "FAIL $name: exit $rc (want $want): $(cat "$work/err")"; fails=$((fails+1)); }
}
sums=$(cat "$work/e2.json" "$work/v2.bpe" "$work/notes.txt" | md5sum)
expect_out 2 "--encoder-json and --output name the same file" "--output the --encoder-json" \
  --encoder-json "$work/e2.json" --vocab-bpe "$work/v2.bpe" --input "$work/in.txt" --output "$work/e2.json"
expect_out 2 "--vocab-bpe and --output name the same file" "--output the --vocab-bpe" \
  --encoder-json "$work/e2.json" --vocab-bpe "$work/v2.bpe" --input "$work/in.txt" --output "$work/v2.bpe"
expect_out 2 "notes.txt exists and is not a token cache; not replacing it" "--output a text file" \
  "${TOK[@]}" --input "$work/in.txt" --output "$work/notes.txt"
[[ $(cat "$work/e2.json" "$work/v2.bpe" "$work/notes.txt" | md5sum) == "$sums" ]] && echo "ok   refused outputs untouched" \
  || { echo "FAIL a refused --output was changed"; fails=$((fails+1)); }
expect_out 1 "--output .*nodir/x.tok: directory .*nodir does not exist" "--output in a missing directory" \
  "${TOK[@]}" --input "$work/in.txt" --output "$work/nodir/x.tok"
# an existing token cache, even a damaged one, is replaced: the default output, in.txt.tokcache
"$TOOL" "${TOK[@]}" --cache-dir next-to-data --input "$work/in.txt" > /dev/null 2>&1 && head -c 20 "$work/in.txt.tokcache" > "$work/cut" \
  && mv "$work/cut" "$work/in.txt.tokcache" && "$TOOL" "${TOK[@]}" --cache-dir next-to-data --input "$work/in.txt" > /dev/null 2>&1 \
  && "$TOOL" "${TOK[@]}" --input "$work/in.txt" --output "$work/ref.tokcache" > /dev/null 2>&1 \
  && [[ $(stat -c %s "$work/in.txt.tokcache") -eq $(stat -c %s "$work/ref.tokcache") ]] && echo "ok   a damaged token cache is replaced" \
  || { echo "FAIL a damaged token cache as --output was not replaced"; fails=$((fails+1)); }
# --decode ids outside [0, V) or an empty id between commas: one usage error line (exit 2), as
# xtrain_generate --prompt-ids; -5 would otherwise decode as a runtime error (exit 1)
for c in "-5|--decode: -5 is outside the vocabulary \[0, 50257)" "50257|--decode: 50257 is outside the vocabulary" \
         "1,,2|--decode: an empty id between commas in \"1,,2\"" "1,2,|--decode: an empty id between commas"; do
  ids=${c%%|*}
  expect_out 2 "^xtrain_tokenize: usage error: ${c#*|}" "--decode '$ids'" "${TOK[@]}" --decode "$ids"
  [[ $(wc -l < "$work/err") -eq 1 ]] || { echo "FAIL --decode '$ids': not one line"; fails=$((fails+1)); }
done
[[ $("$TOOL" "${TOK[@]}" --decode "15496, 11,995") == "Hello, world" ]] && echo "ok   --decode '15496, 11,995'" \
  || { echo "FAIL --decode '15496, 11,995'"; fails=$((fails+1)); }
# --shard-tokens writes its shards as one set: a failure at a later shard (here: a directory where
# shard 1 goes) or a stop signal while writing leaves no shard and no temporary file or directory
python3 -c 'print("hello world " * 3000)' > "$work/s.txt"
mkdir -p "$work/sh/c_000001.bin"
rc=0; "$TOOL" "${TOK[@]}" --input "$work/s.txt" --shard-tokens 2000 --output "$work/sh/c" > /dev/null 2> "$work/err" || rc=$?
left=$(ls -A "$work/sh" | grep -v '^c_000001.bin$' || true)
[[ $rc -eq 1 && -z "$left" ]] && grep -q "c_000001.bin: exists and is not a regular file" "$work/err" \
  && echo "ok   --shard-tokens failing at shard 1: exit 1, nothing written" \
  || { echo "FAIL --shard-tokens failing at shard 1: exit $rc, left '$left': $(cat "$work/err")"; fails=$((fails+1)); }
rmdir "$work/sh/c_000001.bin"
python3 -c 'print("hello world " * 300000)' > "$work/big.txt"  # 600,001 tokens: 2,001 shards, seconds of writing
"$TOOL" "${TOK[@]}" --input "$work/big.txt" --shard-tokens 300 --output "$work/sh/b" > /dev/null 2> "$work/err" &
pid=$!
for _ in $(seq 600); do [[ -n "$(ls -A "$work/sh")" ]] && break; sleep 0.05; done  # writing has begun
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
left=$(ls -A "$work/sh" | head -3)
[[ $rc -eq 3 && -z "$left" ]] && grep -q "^xtrain_tokenize: stopped by SIGTERM after .* shards: none written (exit 3)$" "$work/err" \
  && echo "ok   --shard-tokens stopped by SIGTERM: exit 3, $(cat "$work/err")" \
  || { echo "FAIL --shard-tokens stopped by SIGTERM: exit $rc, left '$left': $(tail -1 "$work/err")"; fails=$((fails+1)); }
[[ $fails -eq 0 ]]
