#!/usr/bin/env bash
# run_fuzz.sh FUZZER SEEDS TARGET SECONDS [SEED_FILE...]: libFuzzer run of FUZZER for SECONDS, starting
# from the valid inputs that SEEDS writes for TARGET, the files of tests/fuzz/seeds/TARGET/ and the
# SEED_FILEs, in a fresh corpus directory. Exit 0 when no input
# crashed, tripped a sanitizer or exceeded the memory limit; a crashing input is left in the log's
# directory (libFuzzer prints its path) so it can be replayed with `FUZZER <file>`.
set -euo pipefail
fuzzer=$1 seeds=$2 target=$3 seconds=$4
shift 4
work=$(mktemp -d "${TMPDIR:-/tmp}/xtrain-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/seeds"
"$seeds" "$work/seeds"
mkdir -p "$work/seeds/$target"
tree="$(dirname "$0")/seeds/$target"
[[ ! -d $tree ]] || cp "$tree"/* "$work/seeds/$target/"
(($# == 0)) || cp "$@" "$work/seeds/$target/"
[[ -n $(ls -A "$work/seeds/$target") ]] || { echo "no seeds for $target (fuzz_seeds, $tree)"; exit 1; }
# -rss_limit_mb: an input that makes the reader allocate far beyond its size is a finding too.
# Crash artifacts go to the build directory so they survive the cleanup above.
"$fuzzer" -max_total_time="$seconds" -rss_limit_mb=1024 -print_final_stats=1 \
  -artifact_prefix="$PWD/fuzz-$target-" "$work/corpus" "$work/seeds/$target"
