#!/usr/bin/env bash
# One 2-rank training job under AddressSanitizer + UndefinedBehaviorSanitizer (registered only in a
# -DXTRAIN_SANITIZE=ON build; CI's sanitize phase). Every piece a run touches: tokenizer, token cache,
# model with grouped-query attention, dropout, grad accumulation, all-reduce, validation, metrics,
# checkpoint write and resume. Any sanitizer report ends the rank non-zero, so the job fails.
# Leak detection is off: Open MPI does not free all of its own allocations at MPI_Finalize (its
# documented behaviour), and LeakSanitizer would report them as leaks of every rank.
source "$(dirname "$0")/common.sh"
xt_data
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
args=("${DATA[@]}" "${TINY[@]}" --steps 4 --dropout 0.1 --grad-accum 2 --val-every 2 --val-seqs 8
      --ckpt "$WORK/a.ckpt" --metrics "$WORK/m.jsonl")
"${MPIRUN[@]}" -np 2 -x ASAN_OPTIONS -x UBSAN_OPTIONS "$XT" "${args[@]}" --stop-after 2 > "$WORK/1.log" 2>&1 \
  || { cat "$WORK/1.log"; fatal "first half"; }
"${MPIRUN[@]}" -np 2 -x ASAN_OPTIONS -x UBSAN_OPTIONS "$XT" "${args[@]}" --resume "$WORK/a.ckpt" > "$WORK/2.log" 2>&1 \
  || { cat "$WORK/2.log"; fatal "resumed half"; }
if grep -E "ERROR: AddressSanitizer|runtime error:" "$WORK/1.log" "$WORK/2.log"; then fail "sanitizer report"; fi
grep -q "resumed from .* at step 2" "$WORK/2.log" || { cat "$WORK/2.log"; fail "no resume"; }
xt_finish "ok: 2 ranks, 4 steps with a checkpoint and a resume, no sanitizer report"
