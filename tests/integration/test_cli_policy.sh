#!/usr/bin/env bash
# One command-line policy in all six programs (core/cli.h): --version prints "<program> <version>",
# --help a usage line, the options and the policy (exit 0); an abbreviated option name and a stray
# word are usage errors (exit 2); an option given twice takes its last value, shown by a value that
# the program's first check names (or, with the last value good, the next check failing instead).
source "$(dirname "$0")/common.sh"
xt_data
B="$XTRAIN_BIN_DIR"
# run CODE PATTERN command...: exit CODE and the one line of stderr (or stdout, for exit 0) matching
# PATTERN; rank lines of xtrain_mpi count as the line.
run() {
  local code=$1 pattern=$2 rc=0
  shift 2
  timeout -s KILL 120 "$@" > "$WORK/out" 2> "$WORK/err" || rc=$?
  local log="$WORK/err"
  [[ $code -eq 0 ]] && log="$WORK/out"
  if [[ $rc -eq $code ]] && grep -qE -- "$pattern" "$log"; then
    echo "ok   ${*#"$B/"} -> exit $rc: $(grep -m1 -E -- "$pattern" "$log")"
  else
    fail "$* -> exit $rc (want $code and a line matching '$pattern'): $(head -3 "$WORK/err")"
  fi
}
MPI1=("$B/xtrain_mpi")  # a singleton MPI process, as a one-rank job
THR=("$B/xtrain_threads" --ranks 1)
GEN_ARGS=(--ckpt "$WORK/none.ckpt" --prompt hi "${TOK[@]}")
versions=""
for p in xtrain_mpi xtrain_threads xtrain_tokenize xtrain_generate xtrain_export xtrain_eval; do
  cmd=("$B/$p")
  [[ $p == xtrain_mpi ]] && cmd=("${MPI1[@]}")
  run 0 "^$p [0-9]+\.[0-9]+\.[0-9]+$" "${cmd[@]}" --version
  [[ $(wc -l < "$WORK/out") -eq 1 ]] || fail "$p --version printed more than one line"
  versions+="$(cut -d' ' -f2 "$WORK/out") "
  "${cmd[@]}" --help > "$WORK/help" 2>&1 || fail "$p --help: exit $?"
  grep -q "^Usage: .*$p" "$WORK/help" && grep -q -- "--version" "$WORK/help" \
    && grep -q "an option given twice takes its last value" "$WORK/help" \
    && echo "ok   $p --help: usage line, --version, the policy" || fail "$p --help: $(head -3 "$WORK/help")"
done
[[ $(tr ' ' '\n' <<< "$versions" | sort -u | grep -c .) -eq 1 ]] && echo "ok   one version: $versions" \
  || fail "versions differ: $versions"

# no abbreviations: each is a prefix of exactly one option of its program
run 2 "^rank 0 \(.*usage error: .*'--ste'.*\(see --help\)$" "${MPI1[@]}" "${DATA[@]}" --ste 5
run 2 "^rank 0 \(.*usage error: .*'--ste'.*\(see --help\)$" "${THR[@]}" "${DATA[@]}" --ste 5
# the two trainers' usage errors: one line of one format (core/cli.h, report_options_failure)
"${MPI1[@]}" "${DATA[@]}" --ste 5 > /dev/null 2> "$WORK/mpi.err" || true
"${THR[@]}" "${DATA[@]}" --ste 5 > /dev/null 2> "$WORK/thr.err" || true
cmp -s "$WORK/mpi.err" "$WORK/thr.err" && echo "ok   xtrain_mpi and xtrain_threads: the same usage error line" \
  || fail "usage error lines differ: xtrain_mpi '$(cat "$WORK/mpi.err")', xtrain_threads '$(cat "$WORK/thr.err")'"
run 2 "^xtrain_tokenize: usage error: .*'--print-id'" "$B/xtrain_tokenize" "${TOK[@]}" --print-id x
run 2 "^xtrain_generate: usage error: .*'--temp'" "$B/xtrain_generate" "${GEN_ARGS[@]}" --temp 0
run 2 "^xtrain_generate: usage error: .*'--max-new'" "$B/xtrain_generate" "${GEN_ARGS[@]}" --max-new 2
run 2 "^xtrain_eval: usage error: .*'--max-seq'" "$B/xtrain_eval" --ckpt "$WORK/none.ckpt" --mc x --max-seq 2
run 2 "^xtrain_export: usage error: .*'--form'" "$B/xtrain_export" "$WORK/none.ckpt" --out "$WORK/d" --form hf
# --norm-eps out of range (1e-300 reads as float 0, 1e-45 as a denormal): one line giving the range
for eps in 1e-300 1e-45 0 -1 inf nan 2; do
  run 2 "^rank 0 \(.*usage error: --norm-eps must be in \[1e-12, 1\] " "${THR[@]}" "${DATA[@]}" --arch llama --norm-eps $eps
done
# no stray words (xtrain_export takes one: the checkpoint)
run 2 "^xtrain_tokenize: usage error: " "$B/xtrain_tokenize" "${TOK[@]}" --print-ids x extra
run 2 "^xtrain_generate: usage error: " "$B/xtrain_generate" "${GEN_ARGS[@]}" extra
run 2 "^xtrain_export: usage error: " "$B/xtrain_export" "$WORK/none.ckpt" extra --out "$WORK/d"

# an option given twice: its last value
run 2 "usage error: --seed must be an integer .*got 'b2'" "${MPI1[@]}" "${DATA[@]}" --seed b1 --seed b2
run 2 "usage error: --seed must be an integer .*got 'b2'" "${THR[@]}" "${DATA[@]}" --seed b1 --seed b2
run 2 "^xtrain_generate: usage error: --seed must be an integer .*got 'b2'" "$B/xtrain_generate" "${GEN_ARGS[@]}" --seed b1 --seed b2
run 0 "^995$" "$B/xtrain_tokenize" "${TOK[@]}" --print-ids "Hello" --print-ids " world"
[[ $(wc -l < "$WORK/out") -eq 1 ]] || fail "xtrain_tokenize --print-ids twice printed $(wc -l < "$WORK/out") lines"
run 0 "^ world$" "$B/xtrain_tokenize" "${TOK[@]}" --decode 15496 --decode 995
run 2 "^xtrain_export: usage error: --format must be" "$B/xtrain_export" "$WORK/none.ckpt" --out "$WORK/d" --format hf --format bogus
run 1 "^xtrain_export: error: .*none.ckpt" "$B/xtrain_export" "$WORK/none.ckpt" --out "$WORK/d" --format bogus --format hf
# --help (or --version) on one rank of an MPMD launch: every rank ends at once, exit 0, the help printed
# once (each rank reads its own command line; the ranks agree on --help before anything else)
for side in first second; do
  a=(--help) b=()
  [[ $side == second ]] && a=() b=(--help)
  SECONDS=0
  run 0 "^Usage: mpirun -np N xtrain_mpi" "${MPIRUN[@]}" -q -np 1 "$B/xtrain_mpi" "${a[@]}" : -np 1 "$B/xtrain_mpi" "${b[@]}"
  [[ $SECONDS -le 30 && $(grep -c "^Usage: " "$WORK/out") -eq 1 ]] || fail "MPMD --help on the $side rank: ${SECONDS}s"
done
# empty values stay refused, also as the last of two
run 2 "^xtrain_export: usage error: --out was given an empty value" "$B/xtrain_export" "$WORK/none.ckpt" --out "$WORK/d" --out ""
xt_finish
