#!/usr/bin/env bash
# What a run, a checkpoint and a model directory guard against: a checkpoint of a model xtrain cannot build
# (odd head size, kv heads not dividing heads, eps or theta non-finite or out of range, a tie or arch that
# disagrees with the parameter count) refused in one line by --resume, xtrain_generate and xtrain_export
# alike, and never exported; two jobs given one --ckpt (the second refused); a model directory read while
# an export into it runs (refused); --resume taking the held-out split from the checkpoint; the tokenizer
# a model needs, named; empty option values and a missing rank file; the stop line while a run starts.
source "$(dirname "$0")/common.sh"
xt_data
B="$XTRAIN_BIN_DIR"
GEN="$B/xtrain_generate"
EXP="$B/xtrain_export"
# expect NAME CODE PATTERN command...: the exit code, and ONE line of stderr (after the tools' progress
# lines) matching PATTERN (grep -E)
expect() {
  local name=$1 code=$2 pattern=$3 rc=0
  shift 3
  timeout -s KILL 60 "$@" > "$WORK/out" 2> "$WORK/err" || rc=$?
  local lines
  lines=$(grep -v -E "^(read|write) " "$WORK/err" || true)
  if [[ $rc -eq $code && $(wc -l <<< "$lines") -eq 1 ]] && grep -qE -- "$pattern" <<< "$lines"; then
    printf 'ok   %-44s exit %d: %s\n' "$name" "$rc" "$lines"
  else
    fail "$name: exit $rc (want $code), stderr:"
    sed 's/^/     | /' "$WORK/err" | head -10
  fi
}
MPI1=("${MPIRUN[@]}" -q -np 1 "$XT")  # -q: no Open MPI banner after xtrain's own line

# two small checkpoints: gpt2, and a llama with its own head (2 steps, nothing held out: TINY's --val-every 0)
"${MPI1[@]}" "${DATA[@]}" "${TINY[@]}" --steps 2 --ckpt "$WORK/g.ckpt" > "$WORK/g.log" 2>&1 || { cat "$WORK/g.log"; fatal "training g.ckpt"; }
"${MPI1[@]}" "${DATA[@]}" "${TINY[@]}" --arch llama --tie-embeddings false --steps 2 --ckpt "$WORK/l.ckpt" > "$WORK/l.log" 2>&1 ||
  { cat "$WORK/l.log"; fatal "training l.ckpt"; }

# ---- a model the readers refuse: every reader refuses it alike, and no export of it is written ----
for edit in "HS=15:--head-dim must be even" "HS=1:--head-dim must be even" "KVH=3:--kv-heads \(3\) must divide --heads \(4\)" \
            "norm_eps=inf:--norm-eps must be in" "norm_eps=1e30:--norm-eps must be in" "norm_eps=1e-30:--norm-eps must be in" \
            "rope_theta=inf:--rope-theta must be finite and > 1" "rope_theta=0.5:--rope-theta must be finite and > 1"; do
  field=${edit%%:*} why=${edit#*:}
  forge "$WORK/l.ckpt" bad.ckpt "$field"
  rm -rf "$WORK/bad_export"
  expect "export of a checkpoint with $field" 1 "checkpoint .*bad.ckpt: the model in its header .* is invalid: $why" \
    "$EXP" "$WORK/bad.ckpt" --out "$WORK/bad_export"
  [[ ! -e "$WORK/bad_export/config.json" ]] || fail "$field: an export was written"
  expect "generate from a checkpoint with $field" 1 "checkpoint .*bad.ckpt: the model in its header .* is invalid: $why" \
    "$GEN" --ckpt "$WORK/bad.ckpt" "${TOK[@]}" --max-new-tokens 1
done
expect "--resume of a checkpoint with rope_theta=0.5" 1 "the model in its header .* is invalid: --rope-theta must be finite" \
  "${MPI1[@]}" "${DATA[@]}" --resume "$WORK/bad.ckpt"
# a tie or arch that disagrees with the parameter count: the header's count named, not an internal check
forge "$WORK/l.ckpt" tied.ckpt tie=1
for tool in export generate; do
  args=("$EXP" "$WORK/tied.ckpt" --out "$WORK/bad_export")
  [[ $tool == generate ]] && args=("$GEN" --ckpt "$WORK/tied.ckpt" "${TOK[@]}" --max-new-tokens 1)
  expect "$tool: llama checkpoint with tie=1, untied count" 1 \
    "tied.ckpt: header field num_params = [0-9]+ does not match its model \(.* tied=1\), which has [0-9]+ parameters" "${args[@]}"
  grep -q "check failed" "$WORK/err" && fail "$tool: an internal check failed"
done
forge "$WORK/l.ckpt" gpt2arch.ckpt arch=0
expect "generate: llama checkpoint with arch=gpt2" 1 "gpt2arch.ckpt: the model in its header .* is invalid: --tie-embeddings false needs --arch llama" \
  "$GEN" --ckpt "$WORK/gpt2arch.ckpt" "${TOK[@]}" --max-new-tokens 1

# ---- the tokenizer a model needs: named, with the option to give ----
forge "$WORK/g.ckpt" otherfp.ckpt tokenizer_fingerprint=81985529216486895
expect "generate without the run's tokenizer" 2 \
  "trained with the tokenizer of fingerprint 0123456789abcdef \(the checkpoint\), not the one loaded \(no tokenizer option given: the default GPT-2 files --encoder-json .* --vocab-bpe .*, fingerprint [0-9a-f]{16}\): give the tokenizer options of its training run: --tokenizer NAME" \
  "$GEN" --ckpt "$WORK/otherfp.ckpt" --max-new-tokens 1
# empty values (the docs: an empty file option is a usage error in every tool) and a missing rank file (exit 1)
expect "generate --tokenizer-ranks \"\"" 2 "usage error: --tokenizer-ranks was given an empty value" \
  "$GEN" --ckpt "$WORK/g.ckpt" --tokenizer cl100k_base --tokenizer-ranks ""
expect "generate --prompt-ids \"\"" 2 "usage error: --prompt-ids was given an empty value" "$GEN" --ckpt "$WORK/g.ckpt" "${TOK[@]}" --prompt-ids ""
expect "generate --tokenizer-ranks FILE missing" 1 "error: --tokenizer-ranks $WORK/none.tiktoken: no such file" \
  "$GEN" --ckpt "$WORK/g.ckpt" --tokenizer cl100k_base --tokenizer-ranks "$WORK/none.tiktoken"
expect "xtrain_mpi --val-data \"\"" 2 "usage error: --val-data was given an empty value" "${MPI1[@]}" "${DATA[@]}" --val-data ""
expect "generate --dump-logits x.tokcache" 2 "--dump-logits .*x.tokcache ends in .tokcache" \
  "$GEN" --ckpt "$WORK/g.ckpt" "${TOK[@]}" --dump-logits "$WORK/x.tokcache"
[[ ! -e "$WORK/x.tokcache" ]] || fail "--dump-logits x.tokcache was written"

# another user's --cache-dir (one made first in a sticky /tmp): refused, nothing read or written there (root only)
if [[ $(id -u) -eq 0 ]]; then
  mkdir "$WORK/theirs" && chown 65534 "$WORK/theirs"
  expect "--cache-dir owned by another user" 1 "--cache-dir .*theirs: owned by uid 65534, neither this user \(uid 0\) nor root" \
    "${MPI1[@]}" "${DATA[@]}" "${TINY[@]}" --steps 1 --cache-dir "$WORK/theirs"
  [[ -z "$(ls -A "$WORK/theirs")" ]] || fail "a token cache was written into another user's --cache-dir"
fi

# ---- a model directory is never read half-replaced: while an export into it holds its lock, refused ----
"$EXP" "$WORK/g.ckpt" --out "$WORK/m" > /dev/null
python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "a"); fcntl.flock(f, fcntl.LOCK_EX); time.sleep(60)' "$WORK/m/.xtrain-export.lock" &
holder=$!  # one process holding the lock as an export does (ExportCommit)
for _ in $(seq 100); do flock -n "$WORK/m/.xtrain-export.lock" true || break; sleep 0.1; done
expect "generate --model during an export into it" 1 "model directory .*m: an export into it is running" \
  "$GEN" --model "$WORK/m" --max-new-tokens 1
kill "$holder"
wait "$holder" 2> /dev/null || true
"$GEN" --model "$WORK/m" --max-new-tokens 1 > /dev/null 2>&1 || fail "--model after the export ended"
# --resume with --init-from: the directory is not read, and the run says so
"${MPI1[@]}" "${DATA[@]}" --resume "$WORK/g.ckpt" --init-from "$WORK/m" --steps 3 > "$WORK/init.log" 2>&1 || { cat "$WORK/init.log"; fail "resume with --init-from"; }
grep -q "^note   | --init-from $WORK/m is not read: the weights come from --resume" "$WORK/init.log" || fail "no note on --init-from with --resume"

# ---- --resume takes the held-out split from the checkpoint ----
# g.ckpt holds nothing out (--val-every 0); resumed with only --data, --resume, --ckpt and --steps
cp "$WORK/g.ckpt" "$WORK/split.ckpt"
expect_ok() { local name=$1 rc=0; shift; "$@" > "$WORK/ok.log" 2>&1 || rc=$?; [[ $rc -eq 0 ]] && echo "ok   $name" || { fail "$name: exit $rc"; tail -5 "$WORK/ok.log"; }; }
expect_ok "resume of a run with nothing held out, split not repeated" "${MPI1[@]}" "${DATA[@]}" --resume "$WORK/split.ckpt" --ckpt "$WORK/split.ckpt" --steps 3
# a run that holds out the tail: a --val-every change that keeps the split is allowed; --val-every 0 changes it
"${MPI1[@]}" "${DATA[@]}" "${TINY[@]}" --val-every 2 --val-seqs 8 --steps 2 --ckpt "$WORK/v.ckpt" > "$WORK/v.log" 2>&1 || { cat "$WORK/v.log"; fatal "training v.ckpt"; }
expect_ok "resume with another --val-every, same split" "${MPI1[@]}" "${DATA[@]}" --val-every 3 --val-seqs 8 --resume "$WORK/v.ckpt" --steps 3
grep -q "^step     3/3 | val loss" "$WORK/ok.log" || fail "no validation at the resumed run's end (the split held out nothing?)"
expect "resume with --val-every 0 (another split)" 1 "does not match this run: training tokens" \
  "${MPI1[@]}" "${DATA[@]}" --val-every 0 --resume "$WORK/v.ckpt" --steps 3

# ---- two jobs given one --ckpt: the second is refused while the first runs ----
"${MPI1[@]}" "${DATA[@]}" "${TINY[@]}" --steps 100000 --log-every 1 --ckpt "$WORK/shared.ckpt" > "$WORK/first.log" 2>&1 &
first=$!
for _ in $(seq 600); do grep -q "^step " "$WORK/first.log" && break; sleep 0.1; done
expect "a second job on the same --ckpt" 1 "--ckpt lock .*shared.ckpt.lock: held by another run writing this --ckpt" \
  "${MPI1[@]}" "${DATA[@]}" "${TINY[@]}" --steps 2 --ckpt "$WORK/shared.ckpt"
kill -USR1 "$first"
rc=0; wait "$first" || rc=$?
[[ $rc -eq 3 && ! -e "$WORK/shared.ckpt.lock" ]] || fail "the first job: exit $rc (want 3), lock file left: $(ls "$WORK"/shared.ckpt.lock 2>&1)"
expect_ok "the --ckpt free again after the first job" "${MPI1[@]}" "${DATA[@]}" "${TINY[@]}" --steps 2 --ckpt "$WORK/shared.ckpt"
expect "--metrics named as the --ckpt lock" 2 "--ckpt's lock file and --metrics name the same file" \
  "${MPI1[@]}" "${DATA[@]}" "${TINY[@]}" --steps 2 --ckpt "$WORK/shared.ckpt" --metrics "$WORK/shared.ckpt.lock"

xt_finish "all cases passed"
