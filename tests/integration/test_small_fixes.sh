#!/usr/bin/env bash
# Small things a newcomer meets: the step a stop signal ends on shows no "eta 0m00s", nor the first step (its
# warm-up would make the estimate far too long); a resume over other
# data names the data hashes in hex (as the export registry does); xtrain_generate without a prompt
# option starts from <|endoftext|>; a warmup as long as the run or longer is named in one note; $XTRAIN_DATA naming a
# file is called "not a directory", and one holding a newline stays one line; a --resume that cannot be read
# is named before a scoped option it might settle; config.json's "pad_token_id": -1 is no pad token.
source "$(dirname "$0")/common.sh"
xt_data

# SIGUSR1 to mpirun (forwarded to every rank) after step 3: the run stops after a step, exit 3
"${MPIRUN[@]}" -np 2 "$XT" "${DATA[@]}" "${TINY[@]}" --steps 500 --log-every 1 --ckpt "$WORK/s.ckpt" >"$WORK/stop.log" 2>&1 &
pid=$!
for _ in $(seq 1200); do grep -q "^step     3/500" "$WORK/stop.log" && break; sleep 0.1; done
kill -USR1 "$pid"
set +e
wait "$pid"
rc=$?
set -e
[[ $rc == 3 ]] || { cat "$WORK/stop.log"; fatal "stopped run: exit $rc, want 3"; }
last="$(grep '^step .*/500 | loss' "$WORK/stop.log" | tail -1)"
first="$(grep '^step .*/500 | loss' "$WORK/stop.log" | head -1)"
second="$(grep '^step .*/500 | loss' "$WORK/stop.log" | sed -n 2p)"
[[ "$first" != *"eta"* ]] || fail "the first step, warm-up included, shows an eta: $first"
[[ "$second" == *"| eta "* ]] || fail "a running step without eta: $second"
[[ "$last" != *"eta"* ]] || fail "the stopped step shows an eta: $last"
echo "stopped step line: $last"

# another corpus: the data hashes differ, named in 16 hex digits
head -c 200000 "$WORK/corpus.txt" >"$WORK/other.txt"
set +e
"${MPIRUN[@]}" -np 1 "$XT" --data "$WORK/other.txt" "${TOK[@]}" --val-every 0 --resume "$WORK/s.ckpt" >"$WORK/hash.log" 2>&1
rc=$?
set -e
[[ $rc == 1 ]] && grep -Eq "training data hash is [0-9a-f]{16} in the checkpoint, [0-9a-f]{16} now" "$WORK/hash.log" ||
  { cat "$WORK/hash.log"; fail "resume over other data: exit $rc"; }
echo "data hash mismatch: $(grep -o 'training data hash .*' "$WORK/hash.log")"

# no --prompt: the empty prompt, GPT-2's unconditional start
"$XTRAIN_BIN_DIR/xtrain_generate" --ckpt "$WORK/s.ckpt" "${TOK[@]}" --max-new-tokens 5 --print-ids --seed 3 >"$WORK/gen.txt" 2>"$WORK/gen.err" ||
  { cat "$WORK/gen.err"; fail "xtrain_generate without a prompt"; }
"$XTRAIN_BIN_DIR/xtrain_generate" --ckpt "$WORK/s.ckpt" "${TOK[@]}" --max-new-tokens 5 --print-ids --seed 3 --prompt "" >"$WORK/gen0.txt" 2>/dev/null
[[ "$(wc -w <"$WORK/gen.txt")" == 5 ]] && cmp -s "$WORK/gen.txt" "$WORK/gen0.txt" ||
  fail "no prompt gave '$(cat "$WORK/gen.txt")', --prompt \"\" '$(cat "$WORK/gen0.txt")'"
echo "xtrain_generate without a prompt option: $(cat "$WORK/gen.txt") (as --prompt \"\")"

# a warmup longer than the run: one note that the learning rate never reaches its peak; as long: one that
# it ends there (none for a shorter one)
"$XT_THREADS" --ranks 1 "${DATA[@]}" "${TINY[@]}" --steps 3 --warmup 1000 >"$WORK/warm.log" 2>&1 || { cat "$WORK/warm.log"; fail "warmup run"; }
[[ $(grep -c "^note   | --warmup 1000 is longer than the run (3 steps): the learning rate never reaches its peak --lr 3.00e-03 (9.00e-06 at step 3)$" "$WORK/warm.log") == 1 ]] ||
  { cat "$WORK/warm.log"; fail "no note for --warmup 1000 --steps 3"; }
"$XT_THREADS" --ranks 1 "${DATA[@]}" "${TINY[@]}" --steps 3 --warmup 3 >"$WORK/warm3.log" 2>&1 || fail "warmup 3 run"
[[ $(grep -c "^note   | --warmup 3 is as long as the run (3 steps): the learning rate reaches its peak --lr 3.00e-03 at the last step and never decays$" "$WORK/warm3.log") == 1 ]] ||
  { cat "$WORK/warm3.log"; fail "no note for --warmup 3 --steps 3"; }
"$XT_THREADS" --ranks 1 "${DATA[@]}" "${TINY[@]}" --steps 3 --warmup 2 >"$WORK/warm2.log" 2>&1 || fail "warmup 2 run"
! grep -q "^note .*--warmup" "$WORK/warm2.log" || fail "a note for --warmup 2 --steps 3: $(grep note "$WORK/warm2.log")"
echo "warmup longer than the run: $(grep '^note ' "$WORK/warm.log")"
echo "warmup as long as the run: $(grep '^note ' "$WORK/warm3.log")"

# a --resume that cannot be read, with an option only some optimizers read: the checkpoint's own error (exit 1)
for ckpt in "$WORK/missing.ckpt" "$WORK/corpus.txt"; do
  set +e
  "$XT_THREADS" --ranks 1 "${DATA[@]}" "${TINY[@]}" --resume "$ckpt" --muon-lr 0.02 >"$WORK/rs.out" 2>"$WORK/rs.err"
  rc=$?
  set -e
  [[ $rc == 1 ]] && grep -qF -- "$ckpt" "$WORK/rs.err" && ! grep -q -- "--muon-lr needs" "$WORK/rs.err" ||
    { cat "$WORK/rs.out" "$WORK/rs.err"; fail "--resume $ckpt --muon-lr 0.02: exit $rc"; }
  echo "unreadable --resume with --muon-lr: $(tail -1 "$WORK/rs.err")"
done

# $XTRAIN_DATA naming a file, not a directory: a defaulted file's message says so (exit 2, one line)
set +e
XTRAIN_DATA="$WORK/corpus.txt" "${MPIRUN[@]}" -q -np 1 "$XT" "${TINY[@]}" --steps 1 >"$WORK/dd.out" 2>"$WORK/dd.err"
rc=$?
set -e
[[ $rc == 2 && $(wc -l <"$WORK/dd.err") == 1 ]] &&
  grep -qF -- "--data: the default $WORK/corpus.txt/brown.txt is missing (data directory $WORK/corpus.txt, from \$XTRAIN_DATA, is not a directory (a file or device); set XTRAIN_DATA" "$WORK/dd.err" ||
  { cat "$WORK/dd.out" "$WORK/dd.err"; fail "XTRAIN_DATA naming a file: exit $rc"; }
echo "XTRAIN_DATA naming a file: $(cat "$WORK/dd.err")"
# a newline in it: escaped as \n, the message stays one line
set +e
XTRAIN_DATA="$WORK/new"$'\n'"line" "${MPIRUN[@]}" -q -np 1 "$XT" "${TINY[@]}" --steps 1 >"$WORK/dn.out" 2>"$WORK/dn.err"
rc=$?
set -e
[[ $rc == 2 && $(wc -l <"$WORK/dn.err") == 1 ]] && grep -qF -- "data directory $WORK/new\nline, from \$XTRAIN_DATA, does not exist" "$WORK/dn.err" ||
  { cat "$WORK/dn.out" "$WORK/dn.err"; fail "XTRAIN_DATA holding a newline: exit $rc"; }
echo "XTRAIN_DATA holding a newline: $(cat "$WORK/dn.err")"

# "pad_token_id": -1 in config.json (older Hugging Face files: no pad token) is read as none by --model and
# --init-from; -2 stays an id out of the vocabulary (exit 1, one line naming the file)
"$XTRAIN_BIN_DIR/xtrain_export" "$WORK/s.ckpt" "${TOK[@]}" --out "$WORK/pad" >"$WORK/pad.log" 2>&1 || { cat "$WORK/pad.log"; fatal "export"; }
set_pad() { python3 -c 'import json,sys; p=sys.argv[1]; j=json.load(open(p)); j["pad_token_id"]=int(sys.argv[2]); json.dump(j, open(p, "w"))' "$WORK/pad/config.json" "$1"; }
set_pad -1
"$XTRAIN_BIN_DIR/xtrain_generate" --model "$WORK/pad" --max-new-tokens 2 --print-ids --seed 3 >"$WORK/padgen.txt" 2>"$WORK/padgen.err" &&
  [[ $(wc -w <"$WORK/padgen.txt") == 2 ]] || { cat "$WORK/padgen.err"; fail "xtrain_generate --model with pad_token_id -1"; }
"${MPIRUN[@]}" -q -np 1 "$XT" "${DATA[@]}" --no-cache --init-from "$WORK/pad" --steps 1 --seq 32 --batch 4 --val-every 0 >"$WORK/padft.log" 2>&1 ||
  { cat "$WORK/padft.log"; fail "--init-from with pad_token_id -1"; }
set_pad -2
set +e
"$XTRAIN_BIN_DIR/xtrain_generate" --model "$WORK/pad" --max-new-tokens 2 >/dev/null 2>"$WORK/padbad.err"
rc=$?
set -e
[[ $rc == 1 && $(wc -l <"$WORK/padbad.err") == 1 ]] && grep -q "config.json: the model is invalid: pad_token_id -2 is not a token id" "$WORK/padbad.err" ||
  { cat "$WORK/padbad.err"; fail "pad_token_id -2: exit $rc"; }
echo "pad_token_id -1 read as none by --model and --init-from; -2: $(cat "$WORK/padbad.err")"
xt_finish
