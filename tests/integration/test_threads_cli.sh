#!/usr/bin/env bash
# xtrain_threads' command line: --help documents every xtrain_mpi option plus --ranks;
# usage errors (no --ranks on the CPU backend, a batch the rank count does not divide, bad --ranks)
# exit 2 with one line; --device cuda without a visible GPU exits 1 with one line saying so; a bad
# input found by a rank exits 1 with one line naming rank 0.
source "$(dirname "$0")/common.sh"
xt_data
opts() { "$1" --help | grep -oE '^  (-[a-z] \[ )?--[a-z-]+' | grep -oE -- '--[a-z-]+' | sort; }
missing=$(comm -3 <( (opts "$XT"; echo --ranks) | sort) <(opts "$XT_THREADS"))
[[ -z "$missing" ]] || fail "options differ between xtrain_mpi + --ranks and xtrain_threads: $missing"
echo "--help: $(opts "$XT_THREADS" | wc -l) options, xtrain_mpi's plus --ranks"
expect() {  # expect CODE PATTERN args...: exit code and the one line of output
  local code=$1 pattern=$2 rc=0
  shift 2
  "$XT_THREADS" "${DATA[@]}" "${TINY[@]}" --steps 2 "$@" > "$WORK/out.log" 2>&1 || rc=$?
  if [[ $rc != "$code" ]] || ! grep -q -- "$pattern" "$WORK/out.log" || [[ $(wc -l < "$WORK/out.log") != 1 ]]; then
    cat "$WORK/out.log"
    fail "$* -> exit $rc (want $code and one line matching '$pattern')"
  else
    echo "$* -> exit $rc: $(cat "$WORK/out.log")"
  fi
}
expect 2 "usage error: --ranks is required with the CPU backend" --device cpu
CUDA_VISIBLE_DEVICES= expect 1 "^rank 0 (.*): error: --device cuda: no GPU visible" --device cuda  # GPUs hidden
expect 2 "must be divisible by world size x --grad-accum = 3 x 1" --ranks 3
expect 2 "usage error: --ranks must be between 0 and 4096" --ranks -2
expect 1 "^rank 0 (.*): --resume $WORK/none.ckpt: no such file" --ranks 2 --resume "$WORK/none.ckpt"
xt_finish
