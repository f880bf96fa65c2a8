#!/usr/bin/env bash
# xtrain_tokenize with the GPT-2 files fetched by scripts/setup.sh (data/gpt2): ids of reference
# strings as tiktoken's "gpt2" encoding gives them (values from js-tiktoken, recorded in
# ../shared/data/gpt2/tokenizer_examples.json), decode round trip, exit codes, the --output checks.
# Runs without ../shared, so CI checks the tokenizer even where the fuller test_tokenizer is skipped.
source "$(dirname "$0")/common.sh"
xt_data_dir gpt2/encoder.json gpt2/vocab.bpe  # data/gpt2 itself, not ../shared/data (xt_data)
TOOL="$XTRAIN_BIN_DIR/xtrain_tokenize"
TOK=(--encoder-json "$DD/gpt2/encoder.json" --vocab-bpe "$DD/gpt2/vocab.bpe")
ids_are() {  # ids_are TEXT EXPECTED_IDS
  local got
  got=$("$TOOL" "${TOK[@]}" --print-ids "$1")
  if [[ "$got" == "$2" ]]; then echo "ok   $(printf '%q' "$1") -> $got"; else fail "$(printf '%q' "$1"): got '$got', want '$2'"; fi
}
ids_are "Hello, world!" "15496 11 995 0"
ids_are "The cat sat on the mat." "464 3797 3332 319 262 2603 13"
ids_are "I can't wait to see you." "40 460 470 4043 284 766 345 13"
ids_are "There are 42 apples." "1858 389 5433 22514 13"
ids_are $'First line.\nSecond line.' "5962 1627 13 198 12211 1627 13"
ids_are "<|endoftext|>" "50256"
# decode(encode(x)) == x for a multi-script string
text=$'caf\u00e9 \u6f22\u5b57 \U0001F600  spaces\n\n'
ids=$("$TOOL" "${TOK[@]}" --print-ids "$text")
back=$("$TOOL" "${TOK[@]}" --decode "$ids")
[[ "$back" == "${text%$'\n\n'}" || "$back"$'\n' == "$text" || "$back" == "$text" ]] && echo "ok   round trip of a multi-script string ($ids)" \
  || fail "round trip: '$back'"
# exit codes: 2 for usage errors, 1 for a missing file
rc=0; "$TOOL" --bogus > /dev/null 2>&1 || rc=$?; [[ $rc -eq 2 ]] || fail "unknown option: exit $rc"
rc=0; "$TOOL" --encoder-json /nonexistent --vocab-bpe "$DD/gpt2/vocab.bpe" --print-ids x > /dev/null 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "missing file: exit $rc"
# outputs: never the input (same device and inode), never a file that is not a regular file
printf 'Hello world\n' > "$WORK/in.txt"; ln "$WORK/in.txt" "$WORK/link.txt"; mkfifo "$WORK/fifo"
rc=0; "$TOOL" "${TOK[@]}" --input "$WORK/in.txt" --output "" > /dev/null 2> "$WORK/err" || rc=$?
[[ $rc -eq 2 ]] && grep -q -- "--output was given an empty value" "$WORK/err" && echo "ok   --output \"\": usage error" \
  || fail "--output \"\": exit $rc: $(cat "$WORK/err")"
# a corpus: one machine-readable line on stdout, the tokenize progress (here only its total) on stderr
"$TOOL" "${TOK[@]}" --input "$WORK/in.txt" --output "$WORK/in.tokcache" > "$WORK/out" 2> "$WORK/err"
[[ $(wc -l < "$WORK/out") -eq 1 ]] && grep -q "^tokens=3 bytes=12 " "$WORK/out" \
  && grep -q "^tokenize $WORK/in.txt | 0.0 MB in " "$WORK/err" && echo "ok   --input: summary on stdout, progress on stderr" \
  || fail "--input: stdout '$(cat "$WORK/out")', stderr '$(cat "$WORK/err")'"
rc=0; "$TOOL" "${TOK[@]}" --input "$WORK/in.txt" --output "$WORK/link.txt" > /dev/null 2>&1 || rc=$?
[[ $rc -eq 2 && "$(cat "$WORK/in.txt")" == "Hello world" ]] && echo "ok   --output a hard link to --input: exit 2, input kept" \
  || fail "--output a hard link to --input: exit $rc"
rc=0; "$TOOL" "${TOK[@]}" --input "$WORK/in.txt" --output "$WORK/fifo" > /dev/null 2> "$WORK/err" || rc=$?
[[ $rc -eq 1 && -p "$WORK/fifo" ]] && grep -q "not a regular file" "$WORK/err" && echo "ok   --output a FIFO: exit 1, left alone" \
  || fail "--output a FIFO: exit $rc: $(cat "$WORK/err")"
# --output is checked before the tokenizer loads: never a tokenizer file, never a file that is not a
# token cache (the cache's own recognizer), and a missing directory fails before any tokenizing
cp "$DD/gpt2/encoder.json" "$WORK/e2.json"; cp "$DD/gpt2/vocab.bpe" "$WORK/v2.bpe"; printf 'notes\n' > "$WORK/notes.txt"
expect_out() {  # expect_out RC PATTERN NAME ARGS...: exit RC, stderr matching PATTERN, no tokenizing
  local want=$1 pattern=$2 name=$3 rc=0
  shift 3
  "$TOOL" "$@" > /dev/null 2> "$WORK/err" || rc=$?
  [[ $rc -eq $want ]] && grep -q -- "$pattern" "$WORK/err" && ! grep -q "^tokenize " "$WORK/err" \
    && echo "ok   $name: exit $rc: $(cat "$WORK/err")" || fail "$name: exit $rc (want $want): $(cat "$WORK/err")"
}
sums=$(cat "$WORK/e2.json" "$WORK/v2.bpe" "$WORK/notes.txt" | md5sum)
expect_out 2 "--encoder-json and --output name the same file" "--output the --encoder-json" \
  --encoder-json "$WORK/e2.json" --vocab-bpe "$WORK/v2.bpe" --input "$WORK/in.txt" --output "$WORK/e2.json"
expect_out 2 "--vocab-bpe and --output name the same file" "--output the --vocab-bpe" \
  --encoder-json "$WORK/e2.json" --vocab-bpe "$WORK/v2.bpe" --input "$WORK/in.txt" --output "$WORK/v2.bpe"
expect_out 2 "notes.txt exists and is not a token cache; not replacing it" "--output a text file" \
  "${TOK[@]}" --input "$WORK/in.txt" --output "$WORK/notes.txt"
[[ $(cat "$WORK/e2.json" "$WORK/v2.bpe" "$WORK/notes.txt" | md5sum) == "$sums" ]] && echo "ok   refused outputs untouched" \
  || fail "a refused --output was changed"
expect_out 1 "--output .*nodir/x.tok: directory .*nodir does not exist" "--output in a missing directory" \
  "${TOK[@]}" --input "$WORK/in.txt" --output "$WORK/nodir/x.tok"
# an existing token cache, even a damaged one, is replaced: the default output, in.txt.tokcache
"$TOOL" "${TOK[@]}" --cache-dir next-to-data --input "$WORK/in.txt" > /dev/null 2>&1 && head -c 20 "$WORK/in.txt.tokcache" > "$WORK/cut" \
  && mv "$WORK/cut" "$WORK/in.txt.tokcache" && "$TOOL" "${TOK[@]}" --cache-dir next-to-data --input "$WORK/in.txt" > /dev/null 2>&1 \
  && "$TOOL" "${TOK[@]}" --input "$WORK/in.txt" --output "$WORK/ref.tokcache" > /dev/null 2>&1 \
  && [[ $(stat -c %s "$WORK/in.txt.tokcache") -eq $(stat -c %s "$WORK/ref.tokcache") ]] && echo "ok   a damaged token cache is replaced" \
  || fail "a damaged token cache as --output was not replaced"
# --decode ids outside [0, V) or an empty id between commas: one usage error line (exit 2), as
# xtrain_generate --prompt-ids; -5 would otherwise decode as a runtime error (exit 1)
for c in "-5|--decode: -5 is outside the vocabulary \[0, 50257)" "50257|--decode: 50257 is outside the vocabulary" \
         "1,,2|--decode: an empty id between commas in \"1,,2\"" "1,2,|--decode: an empty id between commas"; do
  ids=${c%%|*}
  expect_out 2 "^xtrain_tokenize: usage error: ${c#*|}" "--decode '$ids'" "${TOK[@]}" --decode "$ids"
  [[ $(wc -l < "$WORK/err") -eq 1 ]] || fail "--decode '$ids': not one line"
done
[[ $("$TOOL" "${TOK[@]}" --decode "15496, 11,995") == "Hello, world" ]] && echo "ok   --decode '15496, 11,995'" \
  || fail "--decode '15496, 11,995'"
# --shard-tokens never writes into a cache directory (--cache-dir's or the per-user default): exit 2, one line
mkdir -p "$WORK/shc" "$WORK/shx/xtrain"
python3 -c 'print("hello world " * 30)' > "$WORK/s0.txt"
for args in "--cache-dir $WORK/shc --output $WORK/shc/c" "--output $WORK/shx/xtrain/c"; do
  rc=0; XDG_CACHE_HOME="$WORK/shx" "$TOOL" "${TOK[@]}" --input "$WORK/s0.txt" --shard-tokens 2000 $args > /dev/null 2> "$WORK/err" || rc=$?
  [[ $rc -eq 2 && $(wc -l < "$WORK/err") -eq 1 && -z $(find "$WORK/shc" "$WORK/shx/xtrain" -mindepth 1) ]] \
    && grep -q -- "--output .*c_000000.bin is inside the token cache directory" "$WORK/err" \
    && echo "ok   --shard-tokens $args: $(cat "$WORK/err")" || fail "--shard-tokens $args: exit $rc: $(cat "$WORK/err")"
done
# --shard-tokens writes its shards as one set: a failure at a later shard (here: a directory where
# shard 1 goes) or a stop signal while writing leaves no shard and no temporary file or directory
python3 -c 'print("hello world " * 3000)' > "$WORK/s.txt"
mkdir -p "$WORK/sh/c_000001.bin"
rc=0; "$TOOL" "${TOK[@]}" --input "$WORK/s.txt" --shard-tokens 2000 --output "$WORK/sh/c" > /dev/null 2> "$WORK/err" || rc=$?
left=$(ls -A "$WORK/sh" | grep -v '^c_000001.bin$' || true)
[[ $rc -eq 1 && -z "$left" ]] && grep -q "c_000001.bin: exists and is not a regular file" "$WORK/err" \
  && echo "ok   --shard-tokens failing at shard 1: exit 1, nothing written" \
  || fail "--shard-tokens failing at shard 1: exit $rc, left '$left': $(cat "$WORK/err")"
rmdir "$WORK/sh/c_000001.bin"
# --jsonl-field is read only from JSON lines inputs (the trainer's rule): over a text, one line, exit 2, no shard
rc=0; "$TOOL" "${TOK[@]}" --input "$WORK/s.txt" --shard-tokens 2000 --output "$WORK/sh/j" --jsonl-field body > /dev/null 2> "$WORK/err" || rc=$?
[[ $rc -eq 2 && $(wc -l < "$WORK/err") -eq 1 && -z "$(ls -A "$WORK/sh")" ]] \
  && grep -q -- "usage error: --jsonl-field body is not read: no --input file is JSON lines (--data-format auto" "$WORK/err" \
  && echo "ok   --shard-tokens --jsonl-field over a text: $(cat "$WORK/err")" \
  || fail "--shard-tokens --jsonl-field over a text: exit $rc: $(cat "$WORK/err")"
printf '{"body": "hello world"}\n' > "$WORK/s.jsonl"
rc=0; "$TOOL" "${TOK[@]}" --input "$WORK/s.txt,$WORK/s.jsonl" --shard-tokens 2000 --output "$WORK/sh/j" --jsonl-field body \
  > /dev/null 2> "$WORK/err" || rc=$?
[[ $rc -eq 0 && -f "$WORK/sh/j_000000.bin" ]] && echo "ok   --shard-tokens --jsonl-field with a JSON lines input" \
  || fail "--shard-tokens --jsonl-field with a JSON lines input: exit $rc: $(cat "$WORK/err")"
rm -f "$WORK"/sh/j_*.bin
python3 -c 'print("hello world " * 300000)' > "$WORK/big.txt"  # 600,001 tokens: 2,001 shards, seconds of writing
"$TOOL" "${TOK[@]}" --input "$WORK/big.txt" --shard-tokens 300 --output "$WORK/sh/b" > /dev/null 2> "$WORK/err" &
pid=$!
for _ in $(seq 600); do [[ -n "$(ls -A "$WORK/sh")" ]] && break; sleep 0.05; done  # writing has begun
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
left=$(ls -A "$WORK/sh" | head -3)
[[ $rc -eq 3 && -z "$left" ]] && grep -q "^xtrain_tokenize: stopped by SIGTERM after .* shards: none written (exit 3)$" "$WORK/err" \
  && echo "ok   --shard-tokens stopped by SIGTERM: exit 3, $(cat "$WORK/err")" \
  || fail "--shard-tokens stopped by SIGTERM: exit $rc, left '$left': $(tail -1 "$WORK/err")"
xt_finish
