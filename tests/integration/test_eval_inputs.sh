#!/usr/bin/env bash
# xtrain_eval's inputs and the trainer's evaluation options, on a model trained for 2 steps: every bad
# input (missing, empty, a directory, a device, a file listed twice, a missing field, a label outside the
# choices, a truncated .zst, a line over 256 MiB, a bad tokenizer file...) ends in one line on stderr
# naming the option given and the file, exit 1 (2 for a usage error), within seconds; --mc reads .zst
# (the same figures as the plain file, also in the trainer's --eval-mc); --loss files are cached as the
# trainer caches --data (--cache-dir, next-to-data, --no-cache, the default $XDG_CACHE_HOME/xtrain), with
# the same loss every way (--no-cache with --cache-dir is refused, as the trainer's; --data-format, --seq,
# --max-seqs, --cache-dir and --no-cache without --loss too: --mc reads no cache); --eval-mc's help and its
# error say NAME=FILE. Needs data/ (scripts/setup.sh).
source "$(dirname "$0")/common.sh"
xt_data
EVAL="$XTRAIN_BIN_DIR/xtrain_eval"
BOUND=60  # seconds a refusal may take (the slowest reads 270 MB of a .zst before refusing)
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
python3 "$(dirname "$0")/make_eval_items.py" "$WORK"
"$XT" "${DATA[@]}" "${TINY[@]}" --steps 2 --no-cache --ckpt "$WORK/m.ckpt" > "$WORK/train.log" 2>&1 \
  || { cat "$WORK/train.log"; fail "training the model"; exit 1; }
M=(--ckpt "$WORK/m.ckpt" "${TOK[@]}")
head -c 20000 "$WORK/corpus.txt" > "$WORK/small.txt"

# refused CODE PATTERN args... : xtrain_eval exits CODE within BOUND s, its stderr one line matching
# "^xtrain_eval: (usage error|error): PATTERN" after the progress lines of the work done before it (a
# --loss file's tokenize, jsonl and cache lines), nothing on stdout
refused() {
  local code=$1 pattern=$2
  shift 2
  local t0=$SECONDS rc=0
  timeout -s KILL $BOUND "$EVAL" "$@" > "$WORK/out" 2> "$WORK/all_err" || rc=$?
  grep -vE '^(tokenize .* \| .* MB|cache  \| |jsonl  \| )' "$WORK/all_err" > "$WORK/err" || true
  if [[ $rc -eq $code && $(wc -l < "$WORK/err") -eq 1 ]] && grep -qE -- "^xtrain_eval: (usage )?error: $pattern" "$WORK/err" \
     && [[ ! -s "$WORK/out" ]]; then
    printf 'ok   exit %d in %2ds: %s\n' "$rc" $((SECONDS - t0)) "$(cat "$WORK/err")"
  else
    fail "xtrain_eval $*: exit $rc (want $code), want one line matching '$pattern', got:"
    sed 's/^/     | /' "$WORK/err" | head -5
  fi
}
: > "$WORK/empty.txt"
: > "$WORK/empty.jsonl"
mkdir "$WORK/nothing"
item() { python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])))' "$1" > "$WORK/$2"; }
item '{"ctx": "a", "endings": ["b", "c"], "label": 2}' label2.jsonl
item '{"ctx": "a", "endings": ["b", "c"], "label": -1}' labelneg.jsonl
item '{"ctx": "a", "endings": ["b", "c"]}' nolabel.jsonl
item '{"ctx": "a", "endings": ["b", "c"], "label": 1.5}' labelfloat.jsonl
item '{"context": "a", "choices": ["b"], "answer": 0}' onechoice.jsonl
python3 -c 'import json; print(json.dumps({"ctx": "a", "endings": ["b " * 100, "c"], "label": 0}))' > "$WORK/longchoice.jsonl"
echo '[1, 2]' > "$WORK/array.jsonl"
zstd -q "$WORK/hs.jsonl" -o "$WORK/hs.jsonl.zst"
head -c 60 "$WORK/hs.jsonl.zst" > "$WORK/cut.jsonl.zst"
head -c 283115520 /dev/zero | zstd -q > "$WORK/zeros.jsonl.zst"  # 270 MiB without a newline, ~9 KB

refused 1 "--loss: cannot read .*missing.txt: No such file or directory" "${M[@]}" --loss "$WORK/missing.txt"
refused 1 "--loss .*nothing: no data files in the directory" "${M[@]}" --loss "$WORK/nothing"
refused 1 "--loss /dev/null: cannot read: not a regular file" "${M[@]}" --loss /dev/null
refused 2 "--loss lists one file twice" "${M[@]}" --loss "$WORK/small.txt,$WORK/small.txt"
ln -s small.txt "$WORK/small_link.txt"
refused 2 "--loss lists one file twice: .*/small.txt and .*/small.txt \\(see --help\\)$" "${M[@]}" --loss "$WORK/small.txt" --loss "$WORK/small.txt"
refused 2 "--loss lists one file twice: .*small.txt and .*small_link.txt \(the same file\)" "${M[@]}" --loss "$WORK/small.txt" \
  --loss "$WORK/small_link.txt"
refused 2 "--loss \",\": an empty path in the list" "${M[@]}" --loss ,
refused 1 "--loss .*empty.txt: 0 tokens, less than one window of --seq 32 \+ 1" "${M[@]}" --loss "$WORK/empty.txt"
refused 1 "--loss .*empty.jsonl: 0 tokens" "${M[@]}" --loss "$WORK/empty.jsonl"
refused 1 "--loss: .*hs.jsonl:1: no \"text\" field \(--jsonl-field\)" "${M[@]}" --loss "$WORK/hs.jsonl"
refused 2 "--jsonl-field body is not read: no --loss file is JSON lines \(--data-format auto" "${M[@]}" --loss "$WORK/small.txt" --jsonl-field body
refused 2 "--jsonl-field body is not read: no --loss file is JSON lines \(--data-format text" "${M[@]}" --loss "$WORK/hs.jsonl" \
  --data-format text --jsonl-field body
refused 2 "--jsonl-field body is not read: no --loss file" "${M[@]}" --mc "$WORK/hs.jsonl" --jsonl-field body
# the other options only --loss sets read, the same rule: given with no --loss set, one line, exit 2
refused 2 "--data-format jsonl is not read: no --loss file \(the --loss files' format\)" "${M[@]}" --mc "$WORK/hs.jsonl" \
  --data-format jsonl
refused 2 "--data-format auto is not read: no --loss file" "${M[@]}" --mc "$WORK/hs.jsonl" --data-format auto
refused 2 "--seq 16 is not read: no --loss file \(tokens per --loss window\)" "${M[@]}" --mc "$WORK/hs.jsonl" --seq 16
refused 2 "--max-seqs 4 is not read: no --loss file \(windows per --loss set\)" "${M[@]}" --mc "$WORK/hs.jsonl" --max-seqs 4
# --mc reads no cache (its items are tokenized in memory): the cache options are --loss's alone
refused 2 "--cache-dir .*/cd is not read: no --loss file \(the --loss files' token caches\)" "${M[@]}" --mc "$WORK/hs.jsonl" \
  --cache-dir "$WORK/cd"
refused 2 "--cache-dir next-to-data is not read: no --loss file" "${M[@]}" --mc "$WORK/hs.jsonl" --cache-dir next-to-data
refused 2 "--no-cache is not read: no --loss file \(the --loss files' token caches\)" "${M[@]}" --mc "$WORK/hs.jsonl" --no-cache
refused 1 "--loss: .*hs.jsonl:1: no \"body\" field \(--jsonl-field\)" "${M[@]}" --loss "$WORK/small.txt,$WORK/hs.jsonl" --jsonl-field body
refused 1 "--loss: llm.c shard .*small.txt: magic" "${M[@]}" --loss "$WORK/small.txt" --data-format llmc
refused 2 "--seq 33 is longer than the model's context 32" "${M[@]}" --loss "$WORK/small.txt" --seq 33
refused 1 "--mc: cannot read .*missing.jsonl: No such file or directory" "${M[@]}" --mc "$WORK/missing.jsonl"
refused 1 "--mc: cannot read /dev/null: not a regular file" "${M[@]}" --mc /dev/null
refused 1 "--mc: .*empty.jsonl: no items" "${M[@]}" --mc "$WORK/empty.jsonl"
refused 1 "--mc: .*small.txt:1: not valid JSON" "${M[@]}" --mc "$WORK/small.txt"
refused 1 "--mc: .*array.jsonl:1: the line must be a JSON object" "${M[@]}" --mc "$WORK/array.jsonl"
refused 1 "--mc: .*label2.jsonl:1: label: 2 is not an index of the 2 endings" "${M[@]}" --mc "$WORK/label2.jsonl"
refused 1 "--mc: .*labelneg.jsonl:1: label: -1 is not an index" "${M[@]}" --mc "$WORK/labelneg.jsonl"
refused 1 "--mc: .*labelfloat.jsonl:1: label: must be an integer index, got 1.5" "${M[@]}" --mc "$WORK/labelfloat.jsonl"
refused 1 "--mc: .*nolabel.jsonl:1: label: missing" "${M[@]}" --mc "$WORK/nolabel.jsonl"
refused 1 "--mc: .*onechoice.jsonl:1: choices: needs at least 2 choices" "${M[@]}" --mc "$WORK/onechoice.jsonl"
refused 1 "--mc: .*bad.jsonl:2: endings\[1\]: must be a string, got 3" "${M[@]}" --mc "$WORK/hs.jsonl" --mc "$WORK/bad.jsonl"
refused 1 "--mc: .*longchoice.jsonl:1: choices\[0\]: [0-9]+ tokens, more than the model's context of 32" "${M[@]}" --mc "$WORK/longchoice.jsonl"
refused 1 "--mc: .*cut.jsonl.zst: zstd stream ends mid-frame \(truncated\)" "${M[@]}" --mc "$WORK/cut.jsonl.zst"
refused 1 "--mc: .*zeros.jsonl.zst(:1: a line longer than 256 MiB|: decompresses to more than the JSON lines bound)" \
  "${M[@]}" --mc "$WORK/zeros.jsonl.zst"
refused 2 "--mc and --loss must not be given an empty value" "${M[@]}" --mc ""
refused 1 "--ckpt: checkpoint .*missing.ckpt: cannot read: No such file" --ckpt "$WORK/missing.ckpt" "${TOK[@]}" --mc "$WORK/hs.jsonl"
refused 1 "--ckpt: checkpoint .*small.txt: not an xtrain checkpoint" --ckpt "$WORK/small.txt" "${TOK[@]}" --mc "$WORK/hs.jsonl"
refused 1 "--model: cannot read .*nothing/config.json" --model "$WORK/nothing" --mc "$WORK/hs.jsonl"
refused 1 "--vocab-bpe: .*hs.jsonl:1: expected a merge" --ckpt "$WORK/m.ckpt" "${TOK[@]:0:2}" --vocab-bpe "$WORK/hs.jsonl" \
  --mc "$WORK/hs.jsonl"
refused 1 "--encoder-json: cannot read .*missing.json" --ckpt "$WORK/m.ckpt" --encoder-json "$WORK/missing.json" "${TOK[@]:2:2}" \
  --mc "$WORK/hs.jsonl"
refused 2 "--cache-dir was given an empty value" "${M[@]}" --loss "$WORK/small.txt" --cache-dir ""
refused 2 "--json .*x.tokcache ends in .tokcache" "${M[@]}" --loss "$WORK/small.txt" --json "$WORK/x.tokcache"
refused 2 "--json .*/xdg-cache/xtrain/0123456789abcdef.toktables is inside the token cache directory .*\\(\\\$XDG_CACHE_HOME/xtrain" \
  "${M[@]}" --mc "$WORK/hs.jsonl" --json "$XDG_CACHE_HOME/xtrain/0123456789abcdef.toktables"
refused 2 "--json .*/cd/r.json is inside the token cache directory .*/cd \\(--cache-dir" "${M[@]}" --loss "$WORK/small.txt" \
  --cache-dir "$WORK/cd" --json "$WORK/cd/r.json"
refused 2 "--json .*hs.jsonl.zst is an input of this run" "${M[@]}" --mc "$WORK/hs.jsonl.zst" --json "$WORK/hs.jsonl.zst"

# --mc FILE.zst: the items of its plain text, the same figures to the last bit
"$EVAL" "${M[@]}" --mc "$WORK/hs.jsonl" --json "$WORK/plain.json" > /dev/null 2>&1 || fail "--mc hs.jsonl"
"$EVAL" "${M[@]}" --mc "$WORK/hs.jsonl.zst" --json "$WORK/zst.json" > /dev/null 2>&1 || fail "--mc hs.jsonl.zst"
python3 - "$WORK/plain.json" "$WORK/zst.json" <<'PY' || fail "--mc .zst differs from the plain file"
import json, sys
a, b = (json.load(open(p))["mc"][0] for p in sys.argv[1:])
assert a["items"] == b["items"] == 5, (a["items"], b["items"])
for k in ("acc", "acc_norm", "acc_token_mean", "right_logprob", "per_item"):
    assert a[k] == b[k], k
print("--mc .zst == plain: 5 items, right_logprob %r" % a["right_logprob"])
PY

# --loss caches: where the trainer's --data caches go, under the same options
loss_of() { python3 -c 'import json,sys; print(repr(json.load(open(sys.argv[1]))["loss"][0]["loss"]))' "$1"; }
caches() { find "$@" -name '*.tokcache' 2> /dev/null | wc -l; }
cp "$WORK/small.txt" "$WORK/nothing/held.txt"
L=(--loss "$WORK/nothing/held.txt" --json "$WORK/l.json")
rm -rf "$XDG_CACHE_HOME"  # the caches of the refused runs above
"$EVAL" "${M[@]}" "${L[@]}" > "$WORK/default.out" 2> "$WORK/default.log" || { cat "$WORK/default.log"; fail "--loss, default cache"; }
# stdout is the table alone (header, one row, the device line); the tokenize and cache lines go to stderr
grep -vqE '^(kind +set|loss +.*held.txt +[0-9]+ .*[0-9]\.[0-9]{4}$|\(cpu .*, fp32; --eval-batch 8\)$)' "$WORK/default.out" \
  && { sed 's/^/     | /' "$WORK/default.out"; fail "stdout holds more than the table"; }
[[ $(wc -l < "$WORK/default.out") -eq 3 ]] || fail "stdout holds $(wc -l < "$WORK/default.out") lines, want the table's 3"
grep -q "^tokenize .*held.txt | " "$WORK/default.log" && grep -q "^cache  | 1 text file" "$WORK/default.log" \
  || { cat "$WORK/default.log"; fail "no tokenize and cache lines on stderr"; }
[[ $(caches "$XDG_CACHE_HOME/xtrain") -eq 1 ]] || fail "the default cache dir holds $(caches "$XDG_CACHE_HOME/xtrain") caches, want 1"
grep -q "tokenized now: 1 on 1 rank" "$WORK/default.log" || fail "first --loss run: the file was not tokenized"
ref=$(loss_of "$WORK/l.json")
"$EVAL" "${M[@]}" "${L[@]}" > "$WORK/again.log" 2>&1 || fail "--loss, default cache again"
grep -q "caches reused: 1" "$WORK/again.log" || { cat "$WORK/again.log"; fail "second --loss run: the cache was not reused"; }
[[ $(loss_of "$WORK/l.json") == "$ref" ]] || fail "loss from the cache $(loss_of "$WORK/l.json") != $ref"
"$EVAL" "${M[@]}" "${L[@]}" --cache-dir "$WORK/cd" > "$WORK/cd.log" 2>&1 || fail "--cache-dir DIR"
[[ $(caches "$WORK/cd") -eq 1 ]] || fail "--cache-dir DIR holds $(caches "$WORK/cd") caches, want 1"
[[ $(loss_of "$WORK/l.json") == "$ref" ]] || fail "--cache-dir DIR: loss differs"
"$EVAL" "${M[@]}" "${L[@]}" --cache-dir next-to-data > "$WORK/ntd.log" 2>&1 || fail "--cache-dir next-to-data"
[[ -f "$WORK/nothing/held.txt.tokcache" ]] || fail "--cache-dir next-to-data wrote no held.txt.tokcache"
[[ $(loss_of "$WORK/l.json") == "$ref" ]] || fail "--cache-dir next-to-data: loss differs"
rm -rf "$XDG_CACHE_HOME" "$WORK/cd" "$WORK/nothing/held.txt.tokcache"
"$EVAL" "${M[@]}" "${L[@]}" --no-cache > "$WORK/nc.log" 2>&1 || fail "--no-cache"
[[ $(caches "$XDG_CACHE_HOME" "$WORK/cd" "$WORK/nothing") -eq 0 && ! -e "$WORK/cd" ]] || fail "--no-cache wrote a cache"
[[ $(loss_of "$WORK/l.json") == "$ref" ]] || fail "--no-cache: loss differs"
refused 2 "--cache-dir and --no-cache exclude each other" "${M[@]}" "${L[@]}" --no-cache --cache-dir "$WORK/cd"
[[ ! -e "$WORK/cd" ]] || fail "--no-cache --cache-dir made the directory"
echo "--loss: loss $ref with the default cache (made, then reused), --cache-dir DIR, next-to-data and --no-cache"

help=$("$EVAL" --help)
for o in cache-dir no-cache mc loss json; do grep -q -- "--$o " <<< "$help" || fail "xtrain_eval --help does not document --$o"; done
grep -q "\.zst" <<< "$help" || fail "xtrain_eval --help does not say --mc reads .zst"

# the trainer: --eval-mc takes NAME=FILE in its help and its error; it reads a .zst too
grep -q -- "--eval-mc arg *NAME=FILE, repeatable" <<< "$("$XT" --help)" || fail "xtrain_mpi --help: --eval-mc is not NAME=FILE"
set +e
"$XT" "${DATA[@]}" --eval-mc "$WORK/hs.jsonl" > "$WORK/u.log" 2>&1
rc=$?
set -e
[[ $rc -eq 2 && $(wc -l < "$WORK/u.log") -eq 1 ]] && grep -q -- "--eval-mc takes NAME=FILE, got '.*hs.jsonl'" "$WORK/u.log" \
  || { cat "$WORK/u.log"; fail "--eval-mc FILE: exit $rc, want 2 and one line saying NAME=FILE"; }
"$XT" "${DATA[@]}" "${TINY[@]}" --no-cache --steps 1 --val-every 1 --eval-mc hs="$WORK/hs.jsonl.zst" --metrics "$WORK/m.jsonl" \
  > "$WORK/zt.log" 2>&1 || { cat "$WORK/zt.log"; fail "--eval-mc hs=hs.jsonl.zst"; }
python3 -c 'import json,sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert any(x["type"] == "eval" and x["name"] == "hs" and x["items"] == 5 for x in r), r' "$WORK/m.jsonl" \
  || fail "--eval-mc hs=hs.jsonl.zst: no eval record of 5 items"

[[ $fails -eq 0 ]] || { echo "$fails failure(s)"; exit 1; }
echo "PASS"
