# shellcheck shell=bash
# The helpers of every shell test (sourced first thing): programs, a scratch directory, test data, the
# model families, launchers, and one way to count failures. Needs XTRAIN_BIN_DIR (tests/CMakeLists.txt).
# Test data: a 400 KB excerpt of data/brown.txt (scripts/setup.sh) with the GPT-2 files in data/gpt2,
# or, when data/ is absent, ../shared/data; exit 77 (ctest: skipped) when neither is there.
set -euo pipefail

XT="${XTRAIN_BIN_DIR:?XTRAIN_BIN_DIR not set}/xtrain_mpi"
XT_THREADS="$XTRAIN_BIN_DIR/xtrain_threads"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/xtrain-test.XXXXXX")"

# ---- failures: counted, reported once ----
# One line per failure, in a file beside $WORK (not in it: tests compare $WORK's contents), so that a
# failure counted in a subshell or a background job counts too.
XT_FAILURES="$WORK.failures"
: > "$XT_FAILURES"
# fail MESSAGE: prints "FAIL: MESSAGE" and counts a failure; the test goes on (returns 0) and ends non-zero.
fail() {
  echo "FAIL: $*"
  printf '%s\n' "${*//$'\n'/ }" >> "$XT_FAILURES"
}
# fatal MESSAGE: fail, then end the test at once (a step whose outputs the rest of the test needs).
fatal() {
  fail "$@"
  exit 1
}
# xt_failures: the number of failures counted so far.
xt_failures() { wc -l < "$XT_FAILURES"; }
# xt_finish [MESSAGE]: the last line of a test: "N failure(s)" and exit 1 if any was counted, else MESSAGE
# (default PASS) and exit 0.
xt_finish() {
  local n
  n=$(xt_failures)
  ((n == 0)) || { echo "$n failure(s)"; exit 1; }
  echo "${1:-PASS}"
  exit 0
}
# xt_at_exit COMMAND: run COMMAND (eval'd) when the test ends, before $WORK is removed (a job to kill, a
# mount to undo); in the order given.
XT_AT_EXIT=()
xt_at_exit() { XT_AT_EXIT+=("$1"); }
# At exit: the registered commands, then $WORK goes. A test that counted a failure never ends 0 or 77
# (passed, skipped), whichever way it ends.
xt_exit() {
  local rc=$? c n
  for c in "${XT_AT_EXIT[@]}"; do eval "$c" || true; done
  n=$(xt_failures 2> /dev/null || echo 0)
  rm -rf "$WORK" "$XT_FAILURES"
  if ((n > 0 && (rc == 0 || rc == 77))); then
    echo "$n failure(s)"
    exit 1
  fi
  exit "$rc"
}
trap xt_exit EXIT
# check TEXT COMMAND...: runs COMMAND; "ok   TEXT" when it succeeds, else a failure "TEXT".
check() {
  local what=$1
  shift
  if "$@"; then echo "ok   $what"; else fail "$what"; fi
}
# The per-user token cache (--cache-dir's default) goes into the test's own directory, never the
# machine's ~/.cache (CI runs as root on a clean clone).
export XDG_CACHE_HOME="$WORK/xdg-cache"

xt_data() {
  local dd="${XTRAIN_DATA_DIR:-}" sd="${XTRAIN_SHARED_DATA:-}"
  if [[ -f "$dd/brown.txt" && -f "$dd/gpt2/encoder.json" && -f "$dd/gpt2/vocab.bpe" ]]; then
    head -c 400000 "$dd/brown.txt" > "$WORK/corpus.txt"
    TOK=(--encoder-json "$dd/gpt2/encoder.json" --vocab-bpe "$dd/gpt2/vocab.bpe")
  elif [[ -f "$sd/tinyshakespeare.txt" && -f "$sd/gpt2/encoder.json" ]]; then
    head -c 400000 "$sd/tinyshakespeare.txt" > "$WORK/corpus.txt"
    TOK=(--encoder-json "$sd/gpt2/encoder.json" --vocab-bpe "$sd/gpt2/vocab.bpe")
  else
    echo "SKIP: no data (run scripts/setup.sh, or provide ../shared/data)"
    exit 77
  fi
  DATA=(--data "$WORK/corpus.txt" "${TOK[@]}")
}

# A small model that exercises every op, grouped-query attention included; fast on 2 cores.
TINY=(--dim 32 --heads 4 --kv-heads 2 --layers 2 --seq 32 --batch 8 --lr 3e-3 --warmup 5 --val-every 0 --log-every 5)

# The model families the multi-rank tests run on TINY (docs/design.md, "Model"): XT_FAMILIES, and
# xt_family NAME, which sets FAM to the options of family NAME (llama: with its own head).
XT_FAMILIES=(gpt2 llama)
xt_family() {
  case "$1" in
    gpt2) FAM=() ;;
    llama) FAM=(--arch llama --tie-embeddings false) ;;
    *) echo "xt_family: family must be one of ${XT_FAMILIES[*]} (got '$1')" >&2; exit 2 ;;
  esac
}

# mpirun for tests: root needs an opt-in, more ranks than cores need oversubscription.
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

# xt_run LAUNCHER NP [args]: NP ranks as mpirun processes (LAUNCHER mpi) or as threads of one
# xtrain_threads process (LAUNCHER threads).
xt_run() {
  local launcher=$1 np=$2
  shift 2
  case "$launcher" in
    mpi) "${MPIRUN[@]}" -np "$np" "$XT" "$@" ;;
    threads) "$XT_THREADS" --ranks "$np" "$@" ;;
    *) echo "xt_run: launcher must be mpi or threads (got '$launcher')" >&2; return 2 ;;
  esac
}

# xt_losses FILE: "step loss" of every train record of a metrics file, as written (text, so equal
# means bitwise).
xt_losses() {
  python3 -c 'import json,sys
recs=[json.loads(l) for l in open(sys.argv[1])]
print("\n".join("%d %r" % (r["step"], r["loss"]) for r in recs if r["type"] == "train"))' "$1"
}

# xt_data_dir FILE...: DD, the data directory scripts/setup.sh fills ($XTRAIN_DATA_DIR); exit 77 (skipped)
# unless each FILE (a path below it) is there. For tests of the programs' own default files, which
# ../shared/data does not stand in for.
xt_data_dir() {
  DD="${XTRAIN_DATA_DIR:-}"
  local f
  for f in "$@"; do
    [[ -f "$DD/$f" ]] || { echo "SKIP: no data/$f (run scripts/setup.sh)"; exit 77; }
  done
}

# xt_run_ok NAME LAUNCHER NP [args]: xt_run with its output in $WORK/NAME.log; a run that fails prints the
# log and ends the test (fatal: what follows reads its outputs).
xt_run_ok() {
  local name=$1 rc=0
  shift
  xt_run "$@" > "$WORK/$name.log" 2>&1 || rc=$?
  ((rc == 0)) || { cat "$WORK/$name.log"; fatal "run $name: exit $rc"; }
}

# same_losses A B FIRST LAST: metrics files $WORK/A and $WORK/B record, from step FIRST on, the train
# steps FIRST..LAST once each, in order, with the same losses as written (text: equal means bitwise);
# prints both columns when they differ. A predicate: use it with check, or || fail.
same_losses() {
  local a b
  a="$(xt_losses "$WORK/$1" | awk -v f="$3" '$1 >= f')"
  b="$(xt_losses "$WORK/$2" | awk -v f="$3" '$1 >= f')"
  if [[ "$(cut -d' ' -f1 <<< "$a")" == "$(seq "$3" "$4")" && "$a" == "$b" ]]; then return 0; fi
  echo "losses from step $3 ($1 | $2):"
  paste <(echo "$a") <(echo "$b")
  return 1
}

# one_line LOG PATTERN: LOG holds exactly one line and it matches PATTERN (grep's basic regex); else the
# log and a failure.
one_line() {
  [[ $(wc -l < "$1") -eq 1 ]] && grep -q -- "$2" "$1" && return 0
  cat "$1"
  fail "expected one line matching '$2'"
}

# expect_cmd NAME CODE PATTERN COMMAND...: COMMAND (killed after $BOUND s, default 60) exits CODE within
# $MAX_S s (default $BOUND) and the first "rank N (" line of its stderr matches PATTERN (grep -E): an
# error every rank ends on, promptly, with one line naming the rank. Output in $WORK/out and $WORK/err.
expect_cmd() {
  local name=$1 code=$2 pattern=$3 bound=${BOUND:-60}
  shift 3
  local t0=$SECONDS rc=0 line
  timeout -s KILL "$bound" "$@" > "$WORK/out" 2> "$WORK/err" || rc=$?
  line=$(grep -m1 -E "^rank [0-9]+ \(" "$WORK/err" || true)
  if [[ $rc -eq $code ]] && grep -qE -- "$pattern" <<< "$line" && ((SECONDS - t0 <= ${MAX_S:-$bound})); then
    printf 'ok   %-34s exit %d in %2ds: %s\n' "$name" "$rc" $((SECONDS - t0)) "$line"
  else
    fail "$(printf '%-34s exit %d (want %d) in %ds (limit %ds), message: %s' "$name" "$rc" "$code" $((SECONDS - t0)) \
      "${MAX_S:-$bound}" "${line:-<none>}")"
    sed 's/^/     | /' "$WORK/err" | head -20
  fi
}

# rank_pid PATTERN R: the xtrain_mpi process whose command line matches PATTERN (pgrep -f) and whose Open
# MPI rank is R (OMPI_COMM_WORLD_RANK in its environment); nothing while there is none.
rank_pid() {
  local p
  for p in $(pgrep -f "$1" || true); do
    [[ "$(cat "/proc/$p/comm" 2> /dev/null)" == xtrain_mpi ]] || continue
    if tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$p"; fi
  done
}

# forge CKPT NAME FIELD=VALUE...: $WORK/NAME, checkpoint CKPT with header fields edited behind a valid
# checksum (forge_checkpoint.cpp lists the fields); forge CKPT --get FIELD: prints a header field.
forge() {
  local tool="${XTRAIN_FORGE_CHECKPOINT:?XTRAIN_FORGE_CHECKPOINT not set}"
  if [[ $2 == --get ]]; then "$tool" "$@"; else "$tool" "$1" "$WORK/$2" "${@:3}"; fi
}
