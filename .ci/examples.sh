#!/usr/bin/env bash
# CI's examples phase (.ci/run): xtrain used as a library, the way docs/embedding.md tells a program to.
# Installs build/ into a fresh prefix, builds examples/ against it as a CMake project of its own
# (find_package(xtrain)), then runs each example once on a tiny model, from a directory outside the tree:
# train_callback on RANKS ranks (its callback's lines and a checkpoint), xtrain_export of that checkpoint,
# perplexity of the checkpoint and of its export (the same figure: the two loaders agree), generate from
# the export. Seconds on 2 cores, besides the build.
# Usage: .ci/examples.sh [BUILD_DIR [RANKS]]   (defaults: build, 2; a CUDA build on one GPU needs RANKS 1,
# as each rank takes a GPU of its own)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)" ranks="${2:-2}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/xtrain-examples.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

fail() { echo "examples: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
cmake -S "$root/examples" -B "$tmp/build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/configure.log" \
  || { cat "$tmp/configure.log"; fail "examples/ does not configure against the installed prefix"; }
ninja -C "$tmp/build" -j2

# A program outside <prefix>/bin finds the data directory through $XTRAIN_DATA (docs/usage.md, "The data directory").
export XTRAIN_DATA="$tmp/prefix/share/xtrain"
[[ -f "$XTRAIN_DATA/brown.txt" ]] || fail "no $XTRAIN_DATA/brown.txt: scripts/setup.sh fetches data/ before the install"
ex="$tmp/build"
cd "$tmp"
head -c 200000 "$XTRAIN_DATA/brown.txt" > train.txt
head -c 20000 "$XTRAIN_DATA/brown.txt" > score.txt

mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" "$ex/train_callback" train.txt 4 run.ckpt > train.log \
  || { cat train.log; fail "train_callback failed"; }
grep -q '^callback | step 4 | loss ' train.log || { cat train.log; fail "train_callback: no callback line for step 4"; }
grep -q '^callback | 4 steps | best validation loss ' train.log || { cat train.log; fail "train_callback: no summary line"; }
[[ -f run.ckpt ]] || fail "train_callback wrote no checkpoint"

"$tmp/prefix/bin/xtrain_export" run.ckpt --out run-model > export.log || { cat export.log; fail "xtrain_export failed"; }
from_ckpt="$("$ex/perplexity" run.ckpt score.txt)"
from_dir="$("$ex/perplexity" run-model score.txt)"
echo "$from_ckpt"
[[ "$from_ckpt" == *"| perplexity "* && "$from_ckpt" == "$from_dir" ]] \
  || fail "perplexity of the checkpoint and of its export differ: '$from_ckpt' vs '$from_dir'"

text="$("$ex/generate" run-model "The jury said" 8)"
[[ "$text" == "The jury said"?* ]] || fail "generate: the output does not continue the prompt: '$text'"
echo "examples: built against $tmp/prefix; train_callback, perplexity and generate ran"
