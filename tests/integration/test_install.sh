#!/usr/bin/env bash
# The installed programs (cmake --install, docs/embedding.md) away from the tree they were built in: in a
# fresh prefix, run from an unrelated directory, xtrain_mpi trains 2 steps with its defaults (--data and the
# tokenizer from <prefix>/share/xtrain); no program's --help names the source or build tree; with the data
# directory absent a defaulted file is a one-line usage error (exit 2) naming where it was looked for, and
# $XTRAIN_DATA moves it (docs/usage.md, "The data directory").
# Usage: test_install.sh SOURCE_DIR BUILD_DIR CMAKE (ctest passes them).
source "$(dirname "$0")/common.sh"

src="$(cd "$1" && pwd -P)" build="$(cd "$2" && pwd -P)" cmake="$3"
[[ -f "$src/data/brown.txt" && -f "$src/data/gpt2/encoder.json" ]] || { echo "SKIP: no data/ (scripts/setup.sh)"; exit 77; }
unset XTRAIN_DATA
prefix="$WORK/prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$WORK/install.log" || { cat "$WORK/install.log"; fatal "cmake --install"; }
programs=(xtrain_mpi xtrain_threads xtrain_tokenize xtrain_generate xtrain_export)
for p in "${programs[@]}"; do [[ -x "$prefix/bin/$p" ]] || fail "not installed: bin/$p"; done
for f in include/xtrain/train/train.h lib/cmake/xtrain/xtrainConfig.cmake share/xtrain/gpt2/vocab.bpe; do
  [[ -e "$prefix/$f" ]] || fail "not installed: $f"
done
mkdir "$WORK/elsewhere"
cd "$WORK/elsewhere"

# --help: the defaults resolved in the prefix, no path of the trees the programs were built from
for p in "${programs[@]}"; do
  "$prefix/bin/$p" --help > "$p.help" || fail "$p --help: exit $?"
  for tree in "$src" "$build"; do
    ! grep -n "$tree" "$p.help" || fail "$p --help names $tree"
  done
done
grep -q -- "--encoder-json arg (=$prefix/share/xtrain/gpt2/encoder.json)" xtrain_mpi.help ||
  fail "xtrain_mpi --help does not show the prefix's encoder.json: $(grep -- --encoder-json xtrain_mpi.help)"
grep -q -- "--data arg (=$prefix/share/xtrain/brown.txt)" xtrain_mpi.help || fail "xtrain_mpi --help: --data's default"

# 2 steps on 1 rank with the defaults (a small model; the data and the tokenizer as they come)
"${MPIRUN[@]}" -np 1 "$prefix/bin/xtrain_mpi" --dim 32 --layers 1 --seq 32 --batch 4 --val-every 0 --steps 2 \
  > train.log 2>&1 || { cat train.log; fatal "the installed xtrain_mpi with its defaults: exit $?"; }
grep -q "^data   | $prefix/share/xtrain/brown.txt | " train.log || { cat train.log; fail "not the prefix's brown.txt"; }
grep -q "^step     2/2 | loss " train.log || { cat train.log; fail "no step 2"; }
echo "trained 2 steps: $(grep '^step     2/2' train.log)"

# the data directory absent: one line, exit 2, naming where it was looked for
mv "$prefix/share/xtrain" "$prefix/share/moved"
for p in xtrain_mpi xtrain_threads; do
  set +e
  "$prefix/bin/$p" --steps 2 > "$p.out" 2> "$p.err"
  rc=$?
  set -e
  [[ $rc == 2 && $(wc -l < "$p.err") == 1 ]] || { cat "$p.out" "$p.err"; fail "$p without its data directory: exit $rc"; }
  grep -q -- "--data: the default .*brown.txt is missing (no data directory found; looked in \$XTRAIN_DATA (unset), $prefix/share/xtrain (absent); set XTRAIN_DATA" "$p.err" ||
    fail "$p's line does not say where it looked: $(cat "$p.err")"
done
echo "no data directory: $(cat xtrain_mpi.err)"
# $XTRAIN_DATA names it instead
XTRAIN_DATA="$prefix/share/moved" "$prefix/bin/xtrain_mpi" --help > moved.help
grep -q -- "--data arg (=$prefix/share/moved/brown.txt)" moved.help || fail "\$XTRAIN_DATA not used: $(grep -- '--data arg' moved.help)"
xt_finish "ok: installed in $prefix, ran from $PWD"
