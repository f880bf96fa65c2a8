#!/usr/bin/env bash
# Bad input: each case ends EVERY rank promptly with the expected exit code and one line
# naming the rank and the cause; no rank hangs (each run is bounded by `timeout`, the whole test by
# the ctest TIMEOUT) and no damaged file is left behind.
source "$(dirname "$0")/common.sh"
xt_data
BOUND=60  # seconds; a hang in a collective would hit this
# expect NAME CODE PATTERN NP args...: common.sh's expect_cmd for xtrain_mpi on NP ranks: the exit code,
# stderr's rank line matching PATTERN, the job ended within MAX_S seconds (default BOUND; set it as
# `MAX_S=15 expect ...`)
expect() {
  local name=$1 code=$2 pattern=$3 np=$4
  shift 4
  expect_cmd "$name" "$code" "$pattern" "${MPIRUN[@]}" -np "$np" "$XT" "$@"
}
OK=("${DATA[@]}" "${TINY[@]}")
expect "missing corpus" 1 "cannot read .*nope.txt" 2 "${OK[@]}" --data "$WORK/nope.txt"
mkdir "$WORK/no-shards"  # a directory is a list of shards (test_data_shards.sh); an empty one is an error
expect "corpus is an empty directory" 1 "no-shards: no data files in the directory" 2 "${OK[@]}" --data "$WORK/no-shards"
expect "missing encoder.json" 1 "nope.json" 2 "${OK[@]}" --encoder-json "$WORK/nope.json"
printf '{"a": ' > "$WORK/bad.json"
expect "malformed encoder.json" 1 "bad.json" 2 "${OK[@]}" --encoder-json "$WORK/bad.json"
head -c 500 "$WORK/corpus.txt" > "$WORK/short.txt"  # ~110 tokens; one batch needs 8 x 32 + 1
expect "corpus shorter than a batch" 1 "corpus too short" 2 "${OK[@]}" --data "$WORK/short.txt"
# Usage errors (exit 2) are checked in-process, with these messages, by tests/unit/test_options.cpp;
# here only those that show every rank ending: 4 ranks, 2 ranks, and options that differ across ranks.
expect "batch not divisible (world 4)" 2 "divisible by world size" 4 "${OK[@]}" --batch 6
expect "unknown option" 2 "usage error: .*--bogus" 2 "${OK[@]}" --bogus 1
# the CPU backend keeps no bf16 weight copy: per-use is refused on every rank, as --attention is
expect "--weight-copy per-use on the CPU" 2 "usage error: --weight-copy per-use needs --dtype bf16 on the CUDA backend" 2 "${OK[@]}" --weight-copy per-use
expect "--fp8 on the CPU" 2 "usage error: --fp8 needs the CUDA backend with --dtype bf16" 2 "${OK[@]}" --fp8 mlp

expect "--ckpt in a missing directory" 1 "--ckpt .*does not exist" 2 "${OK[@]}" --ckpt "$WORK/nodir/x.ckpt"
# a name that fits NAME_MAX (255) but not with the temporary suffix the write adds: refused at start
expect "--ckpt name too long to write" 1 "--ckpt .*: cannot create files in .*: File name too long" 2 "${OK[@]}" --ckpt "$WORK/$(printf "c%.0s" {1..240})"
mkfifo "$WORK/fifo"
expect "--ckpt is a FIFO" 1 "--ckpt .*is not a regular file" 2 "${OK[@]}" --ckpt "$WORK/fifo"
expect "--metrics is a FIFO" 1 "--metrics .*is not a regular file" 2 "${OK[@]}" --metrics "$WORK/fifo"
[[ -p "$WORK/fifo" ]] || fail "the FIFO was replaced"
expect "--data /dev/null" 1 "--data /dev/null: cannot read: not a regular file" 1 "${TOK[@]}" "${TINY[@]}" --data /dev/null
[[ ! -e /dev/null.tokcache ]] || fail "--data /dev/null created /dev/null.tokcache"
# a token cache's name: in --cache-dir the ranks map the cache, and writing over it would kill them (SIGBUS)
expect "--metrics named like a token cache" 2 "--metrics .*ends in .tokcache" 2 "${OK[@]}" --cache-dir "$WORK" --metrics "$WORK/0123456789abcdef-0123456789abcdef.tokcache"
expect "--ckpt named like a token cache" 2 "--ckpt .*ends in .tokcache" 2 "${OK[@]}" --ckpt "$WORK/x.tokcache"
expect "--metrics in a missing directory" 1 "--metrics .*does not exist" 2 "${OK[@]}" --metrics "$WORK/nodir/m.jsonl"
# Another user's file in a sticky directory (/tmp's rule): rename(2) may not replace it, so it is
# refused at start, not after the run. Needs root, to run as that other user (nobody).
if [[ $(id -u) -eq 0 ]] && command -v runuser > /dev/null; then
  chmod o+x "$WORK" && mkdir -m 1777 "$WORK/sticky" && cp "$WORK/corpus.txt" "$WORK/sticky/corpus.txt"
  for o in ckpt metrics timeline; do
    echo old > "$WORK/sticky/$o.out"
    MAX_S=15 expect_cmd "--$o: root's file in a sticky dir" 1 "--$o .*$o.out: cannot replace it: .*sticky is a sticky directory" \
      runuser -u nobody -- "$XT" "${TOK[@]}" "${TINY[@]}" --data "$WORK/sticky/corpus.txt" --no-cache --steps 100 --"$o" "$WORK/sticky/$o.out"
    [[ $(cat "$WORK/sticky/$o.out") == old ]] || fail "--$o replaced root's file"
  done
  # The reverse: an unprivileged user (nobody) links a name in the sticky directory to a root-only file,
  # and root's job is given that name. The link is not followed (neither this user's nor root's):
  # refused at start on every rank, the file it names untouched.
  mkdir -m 700 "$WORK/secret"
  for o in ckpt metrics timeline; do
    echo precious > "$WORK/secret/$o.victim" && chmod 600 "$WORK/secret/$o.victim"
    runuser -u nobody -- ln -s "$WORK/secret/$o.victim" "$WORK/sticky/$o.lnk"
    MAX_S=15 expect "--$o: nobody's symlink in a sticky dir" 1 "$o.lnk: is a symlink owned by uid [0-9]+, neither this user .* nor root; not writing through it" \
      2 "${TOK[@]}" "${TINY[@]}" --data "$WORK/sticky/corpus.txt" --no-cache --steps 2 --"$o" "$WORK/sticky/$o.lnk"
    [[ $(cat "$WORK/secret/$o.victim") == precious ]] || fail "--$o wrote through nobody's symlink"
  done
  # the same through a directory: nobody's symlink to a root-only directory, a new file named below it
  runuser -u nobody -- ln -s "$WORK/secret" "$WORK/sticky/dirlink"
  MAX_S=15 expect "--ckpt below nobody's directory symlink" 1 "dirlink is a symlink owned by uid [0-9]+, neither this user" \
    2 "${OK[@]}" --steps 2 --ckpt "$WORK/sticky/dirlink/new.ckpt"
  [[ ! -e "$WORK/secret/new.ckpt" ]] || fail "--ckpt wrote below nobody's directory symlink"
else
  echo "skip sticky-directory cases: they need root (runuser -u nobody)"
fi
expect "--resume is a directory" 1 "--resume .*not a regular file" 2 "${OK[@]}" --resume "$WORK"
# inputs that are not regular files are refused before anything opens them (a FIFO would block)
MAX_S=15 expect "--data is a FIFO" 1 "--data .*fifo: cannot read: not a regular file" 2 "${OK[@]}" --data "$WORK/fifo"
MAX_S=15 expect "--resume is a FIFO" 1 "--resume .*fifo: cannot read: not a regular file" 2 "${OK[@]}" --resume "$WORK/fifo"
MAX_S=15 expect "--vocab-bpe is a FIFO" 1 "--vocab-bpe .*fifo: cannot read: not a regular file" 2 "${OK[@]}" --vocab-bpe "$WORK/fifo"
MAX_S=15 expect "--tokenizer-json is a FIFO" 1 "--tokenizer-json .*fifo: cannot read" 2 --data "$WORK/corpus.txt" "${TINY[@]}" --tokenizer-json "$WORK/fifo"
# SentencePiece models (--tokenizer-model): a text file, a truncated model, a directory
spm="$(dirname "$0")/../vectors/spm_bpe.model"
head -c 100000 "$spm" > "$WORK/cut.model"
MAX_S=15 expect "--tokenizer-model is text" 1 "--tokenizer-model .*corpus.txt: not a SentencePiece model" 2 --data "$WORK/corpus.txt" "${TINY[@]}" --tokenizer-model "$WORK/corpus.txt"
MAX_S=15 expect "--tokenizer-model truncated" 1 "--tokenizer-model .*cut.model: not a SentencePiece model" 2 --data "$WORK/corpus.txt" "${TINY[@]}" --tokenizer-model "$WORK/cut.model"
MAX_S=15 expect "--tokenizer-model is a directory" 1 "--tokenizer-model .*no-shards.*not a regular file" 2 --data "$WORK/corpus.txt" "${TINY[@]}" --tokenizer-model "$WORK/no-shards"
MAX_S=15 expect "--tokens-cache is a FIFO" 1 "--tokens-cache .*fifo: cannot read" 2 "${OK[@]}" --tokens-cache "$WORK/fifo"
[[ -p "$WORK/fifo" ]] || fail "the FIFO was replaced"
# options that differ across ranks (MPMD command lines): one line naming the option; every rank exits 2
mpmd() {  # mpmd ARGS_RANK0 -- ARGS_RANK1: sets MPMD, the command; each rank's exit code goes to $WORK/mpmd.rc.RANK
  local a=() b=()
  while [[ $1 != -- ]]; do a+=("$1"); shift; done
  shift
  b=("$@")
  rm -f "$WORK"/mpmd.rc.*
  # The wrapper ignores SIGTERM: when the first rank exits 2, mpirun terminates the other rank's
  # process tree, and the wrapper must still record its rank's code (the rank exits by itself).
  local wrap='trap "" TERM; "$0" "$@"; rc=$?; echo $rc > "'"$WORK"'/mpmd.rc.$OMPI_COMM_WORLD_RANK"; exit $rc'
  MPMD=("${MPIRUN[@]}" -np 1 bash -c "$wrap" "$XT" "${OK[@]}" "${a[@]}" : -np 1 bash -c "$wrap" "$XT" "${OK[@]}" "${b[@]}")
}
every_rank_exit() {  # every_rank_exit CODE NAME
  [[ "$(cat "$WORK/mpmd.rc.0" 2>/dev/null) $(cat "$WORK/mpmd.rc.1" 2>/dev/null)" == "$1 $1" ]] \
    || fail "$2: rank exit codes $(cat "$WORK"/mpmd.rc.* 2>/dev/null | tr '\n' ' '), want $1 on both"
}
mpmd --batch 8 -- --batch 16
MAX_S=15 expect_cmd "--batch differs across ranks" 2 "usage error: the options differ across ranks: --batch 16 on rank 1 but --batch 8 on rank 0" "${MPMD[@]}"
every_rank_exit 2 "--batch differs"
mpmd -- --lr 1e-3
MAX_S=15 expect_cmd "--lr differs across ranks" 2 "--lr 0.001 on rank 1 but --lr 0.003 on rank 0" "${MPMD[@]}"
every_rank_exit 2 "--lr differs"
mpmd --steps 10 -- --steps 20 --lr 1e-3  # the first differing option in --help order is named
MAX_S=15 expect_cmd "--steps and --lr differ across ranks" 2 "--steps 20 on rank 1 but --steps 10 on rank 0" "${MPMD[@]}"
every_rank_exit 2 "--steps differs"
mpmd -- --attention gemm
MAX_S=15 expect_cmd "--attention differs across ranks" 2 "--attention gemm on rank 1 but --attention auto on rank 0" "${MPMD[@]}"
every_rank_exit 2 "--attention differs"
mpmd -- --weight-copy per-use  # no effect on results, but still one configuration per run
MAX_S=15 expect_cmd "--weight-copy differs across ranks" 2 "--weight-copy per-use on rank 1 but --weight-copy persistent on rank 0" "${MPMD[@]}"
every_rank_exit 2 "--weight-copy differs"
mpmd -- --bogus 1  # a command line bad on rank 1 only: rank 0 must not wait for it
MAX_S=15 expect_cmd "unknown option on rank 1 only" 2 "^rank 1 \(.*usage error: .*--bogus" "${MPMD[@]}"
every_rank_exit 2 "unknown option on rank 1"
cp "$WORK/corpus.txt" "$WORK/notes.txt"
"${MPIRUN[@]}" -np 1 "$XT" "${OK[@]}" --tokens-cache "$WORK/notes.txt.cache" --steps 1 > /dev/null 2>&1
printf 'my notes\n' > "$WORK/notes.md"
"${MPIRUN[@]}" -np 1 "$XT" "${OK[@]}" --tokens-cache "$WORK/notes.md" --steps 1 > /dev/null 2>&1 || true
grep -qx "my notes" "$WORK/notes.md" && echo "ok   a --tokens-cache that is not a cache is left untouched" \
  || fail "--tokens-cache overwrote a file that is not a token cache"

# errors that name the file or the cause (bad JSON, symlink loops, long paths) and tokenizer options;
# nothing in $WORK but the test's own out/err may change
printf '{"a": 1e999}' > "$WORK/overflow.json"
: > "$WORK/empty.bpe"
ln -s "$WORK/loop1" "$WORK/loop2"; ln -s "$WORK/loop2" "$WORK/loop1"
hf="${XTRAIN_SHARED_DATA:-}/gpt2/tokenizer.json"
[[ ! -f "$hf" ]] || python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["pre_tokenizer"]={"type": "Metaspace", "replacement": "\u2581"}
json.dump(j, open(sys.argv[2],"w"))' "$hf" "$WORK/meta.json"
# one string with two ids in added_tokens (tokenizers 0.23 keeps the first and drops 50258)
[[ ! -f "$hf" ]] || python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))
j["added_tokens"] += [{"id": i, "content": "<dup>", "single_word": False, "lstrip": False, "rstrip": False,
                       "normalized": False, "special": True} for i in (50257, 50258)]
json.dump(j, open(sys.argv[2],"w"))' "$hf" "$WORK/dup.json"
# token caches (xdg-cache) are xtrain's own outputs
snapshot() { (cd "$WORK" && find . -type f ! -name out ! -name err ! -path './xdg-cache/*' -print0 | sort -z | xargs -0 md5sum); }
before=$(snapshot)
expect "JSON number overflow" 1 "overflow.json: not valid JSON" 2 "${OK[@]}" --encoder-json "$WORK/overflow.json"
expect "empty vocab.bpe" 1 "empty.bpe: 0 merges, but .* tokens that only merges make" 2 "${OK[@]}" --vocab-bpe "$WORK/empty.bpe"
expect "--data is a symlink loop" 1 "loop1.*symbolic links" 2 "${OK[@]}" --data "$WORK/loop1" --no-cache
expect "--resume is a symlink loop" 1 "--resume .*loop1: Too many levels of symbolic links" 2 "${OK[@]}" --resume "$WORK/loop1"
long="$WORK/$(printf 'x%.0s' $(seq 5000))"
expect "5000-character --data path" 1 "cannot read .*xxxx: File name too long" 2 "${OK[@]}" --data "$long" --no-cache
# /dev/zero never ends: under a memory limit its read ends in one line naming it (or, where inputs
# that are not regular files are refused up front, that line)
rc=0; (ulimit -v 2000000; timeout -s KILL $BOUND "$XT" "${OK[@]}" --data /dev/zero --no-cache > /dev/null 2> "$WORK/err") || rc=$?
if [[ $rc -eq 1 ]] && [[ $(grep -c . "$WORK/err") -eq 1 ]] && grep -qE "/dev/zero: (out of memory|.*not a regular file)" "$WORK/err"; then
  echo "ok   --data /dev/zero                    exit 1: $(cat "$WORK/err")"
else fail "--data /dev/zero: exit $rc"; head -5 "$WORK/err"; fi
if [[ -f "$hf" ]]; then
  expect "tokenizer.json Metaspace pre-tokenizer" 1 "meta.json: pre_tokenizer = .* of type \"Metaspace\" is not supported" 2 \
    --data "$WORK/corpus.txt" "${TINY[@]}" --tokenizer-json "$WORK/meta.json"
  expect "tokenizer.json: one string, two ids" 1 "dup.json: added_tokens lists \"<dup>\" twice, with ids 50257 and 50258" 2 \
    --data "$WORK/corpus.txt" "${TINY[@]}" --tokenizer-json "$WORK/dup.json"
else
  echo "skip tokenizer.json Metaspace pre-tokenizer and duplicate added token (no shared GPT-2 tokenizer.json)"
fi
# a model that cannot fit: one line with the estimate, before anything is allocated
expect "model larger than memory" 1 "the model needs about [0-9.]+ GiB per rank \\([0-9]+ parameters" 2 "${OK[@]}" \
  --dim 16384 --heads 128 --layers 64 --no-cache
[[ "$(snapshot)" == "$before" ]] || { fail "files outside the outputs changed"; diff <(echo "$before") <(snapshot) | head; }

# checkpoints: make a good one, then damage copies of it
"${MPIRUN[@]}" -np 2 "$XT" "${OK[@]}" --steps 4 --stop-after 2 --ckpt "$WORK/good.ckpt" > "$WORK/mk.log" 2>&1 \
  || { cat "$WORK/mk.log"; fatal "the good checkpoint to damage: training failed"; }
cp "$WORK/good.ckpt" "$WORK/flip.ckpt"
printf '\x55' | dd of="$WORK/flip.ckpt" bs=1 seek=5000 conv=notrunc status=none
expect "corrupt checkpoint (flipped byte)" 1 "checksum mismatch" 2 "${OK[@]}" --steps 4 --resume "$WORK/flip.ckpt"
head -c 3000 "$WORK/good.ckpt" > "$WORK/trunc.ckpt"
cp "$WORK/good.ckpt" "$WORK/v01.ckpt"
printf '01' | dd of="$WORK/v01.ckpt" bs=1 seek=6 conv=notrunc status=none
expect "checkpoint of format version 01" 1 "format version 01, this xtrain reads version 03" 2 "${OK[@]}" --steps 4 --resume "$WORK/v01.ckpt"
expect "truncated checkpoint" 1 "truncated" 2 "${OK[@]}" --steps 4 --resume "$WORK/trunc.ckpt"
expect "checkpoint of another model" 1 "does not match this run: model" 2 "${OK[@]}" --steps 4 --dim 64 --resume "$WORK/good.ckpt"
expect "checkpoint of another batch" 1 "does not match this run: --batch" 2 "${OK[@]}" --steps 4 --batch 16 --resume "$WORK/good.ckpt"
expect "not a checkpoint" 1 "bad magic" 2 "${OK[@]}" --steps 4 --resume "$WORK/corpus.txt"
expect "missing checkpoint" 1 "--resume .*no such file" 2 "${OK[@]}" --steps 4 --resume "$WORK/none.ckpt"
for changed in "--lr 1e-3" "--warmup 3" "--min-lr-frac 0.2" "--weight-decay 0" "--grad-clip 0.5"; do
  # shellcheck disable=SC2086  # "--opt value" split into two words on purpose
  expect "resume with another ${changed%% *}" 1 "does not match this run: ${changed%% *} is" 2 "${OK[@]}" --steps 4 $changed --resume "$WORK/good.ckpt"
done
# header fields edited behind a valid checksum (tests/integration/forge_checkpoint.cpp): one line, no crash, no over-read
n=$(forge "$WORK/good.ckpt" --get num_params)
forge "$WORK/good.ckpt" zero.ckpt num_params=0
expect "checkpoint claiming 0 parameters" 1 "header field num_params = 0 is out of range" 2 "${OK[@]}" --steps 4 --resume "$WORK/zero.ckpt"
forge "$WORK/good.ckpt" short.ckpt num_params=$((n - 1))
expect "checkpoint claiming N-1 parameters" 1 "header field num_params = $((n - 1)) does not match its model .*which has $n parameters" 2 "${OK[@]}" --steps 4 --resume "$WORK/short.ckpt"
forge "$WORK/good.ckpt" huge.ckpt num_params=$((1 << 62)) body=keep
expect "checkpoint claiming 2^62 parameters" 1 "expected .* (truncated)|more than any file can hold" 2 "${OK[@]}" --steps 4 --resume "$WORK/huge.ckpt"
forge "$WORK/good.ckpt" negstep.ckpt step=-3
expect "checkpoint at a negative step" 1 "header field step = -3 is out of range" 2 "${OK[@]}" --steps 4 --resume "$WORK/negstep.ckpt"
forge "$WORK/good.ckpt" zerodim.ckpt C=0
expect "checkpoint with a zero dimension" 1 "header field C = 0 is out of range" 2 "${OK[@]}" --steps 4 --resume "$WORK/zerodim.ckpt"
# values a healthy run never writes, behind a valid checksum: refused naming the value
forge "$WORK/good.ckpt" nanparam.ckpt params0=nan
expect "checkpoint holding a NaN parameter" 1 "impossible value: parameter 0 is nan" 2 "${OK[@]}" --steps 4 --resume "$WORK/nanparam.ckpt"
forge "$WORK/good.ckpt" negv.ckpt v0=-1
expect "checkpoint with a negative second moment" 1 "impossible value: second moment 0 is -1" 2 "${OK[@]}" --steps 4 --resume "$WORK/negv.ckpt"
expect "checkpoint of another split" 1 "does not match this run: training tokens" 2 "${OK[@]}" --steps 4 --val-every 5 --resume "$WORK/good.ckpt"

# non-finite loss: a huge learning rate blows the model up; the run stops with exit 1 and the last
# good checkpoint (written at step 1) is neither overwritten nor left half-written
expect "non-finite loss" 1 "non-finite" 2 "${OK[@]}" --steps 20 --lr 1e30 --weight-decay 0 --warmup 0 --ckpt "$WORK/nan.ckpt" --ckpt-every 1
[[ $(grep -c "checkpoint written" "$WORK/out") -ge 1 ]] || fail "no good checkpoint before the blow-up"
if ls "$WORK"/nan.ckpt.tmp* > /dev/null 2>&1; then fail "temporary checkpoint left behind"; fi
"${MPIRUN[@]}" -np 1 "$XT" "${OK[@]}" --steps 20 --lr 1e30 --weight-decay 0 --warmup 0 --resume "$WORK/nan.ckpt" --stop-after 1 --ckpt "$WORK/nan2.ckpt" > /dev/null 2>"$WORK/err2" \
  || grep -q "non-finite" "$WORK/err2" || { fail "the kept checkpoint does not load"; cat "$WORK/err2"; }

# a launcher that started several tasks while MPI sees one process (no mpirun here)
rc=0; PMI_SIZE=4 timeout -s KILL $BOUND "$XT" "${OK[@]}" > /dev/null 2> "$WORK/err" || rc=$?
if [[ $rc -eq 1 ]] && grep -q "world of 1" "$WORK/err"; then echo "ok   launcher/MPI mismatch                 exit 1: $(head -1 "$WORK/err")"
else fail "launcher/MPI mismatch: exit $rc"; cat "$WORK/err"; fi

# a rank killed with SIGKILL mid-run ends the whole job non-zero promptly
"${MPIRUN[@]}" -np 2 "$XT" "${OK[@]}" --steps 100000 > "$WORK/kill.log" 2>&1 &
job=$!
# this job's ranks only (other tests may run xtrain_mpi at the same time): their command line has $WORK
mine="$XT .*$WORK/"
victim=""
for _ in $(seq 300); do
  victim=$(rank_pid "$mine" 1)
  [[ -n "$victim" ]] && grep -q "^step" "$WORK/kill.log" && break
  sleep 0.1
done
t0=$SECONDS
kill -9 "$victim"
rc=0; timeout -s KILL $BOUND tail --pid=$job -f /dev/null || rc=$?
wait $job && jrc=0 || jrc=$?
if [[ $rc -eq 0 && $jrc -ne 0 ]] && ! pgrep -f "$mine" > /dev/null; then
  echo "ok   rank 1 killed with SIGKILL          job exit $jrc after $((SECONDS - t0))s, no rank left"
else
  fail "kill -9 of rank 1: job exit $jrc, wait rc $rc"; pkill -9 -f "$mine" || true
fi
xt_finish
