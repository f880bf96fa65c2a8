#!/usr/bin/env bash
# Activation recompute: --recompute 1 (GELU or SwiGLU) and 2 (also the norms) run the forward's own
# ops on the forward's inputs in the backward, so 10 steps give the losses of --recompute 0 exactly
# (metrics text) and byte-identical final checkpoints (parameters and AdamW state). With dropout and
# grad accumulation, on 2 ranks, for each model family (common.sh). A checkpoint resumes under another
# setting; the option is compared across ranks like every other, and a value outside 0..2 is a usage error.
source "$(dirname "$0")/common.sh"
xt_data
ARGS=("${DATA[@]}" "${TINY[@]}" --steps 10 --dropout 0.1 --grad-accum 2)
for family in "${XT_FAMILIES[@]}"; do
  xt_family "$family"
  for r in 0 1 2; do
    xt_run mpi 2 "${ARGS[@]}" "${FAM[@]}" --recompute "$r" --ckpt "$WORK/r$r.ckpt" --metrics "$WORK/r$r.jsonl" > "$WORK/r$r.log" 2>&1 \
      || { cat "$WORK/r$r.log"; echo "FAIL: $family --recompute $r"; exit 1; }
  done
  xt_losses "$WORK/r0.jsonl" > "$WORK/r0.losses"
  [[ $(wc -l < "$WORK/r0.losses") == 10 ]] || { cat "$WORK/r0.losses"; echo "FAIL: $family: want 10 train records"; exit 1; }
  for r in 1 2; do
    xt_losses "$WORK/r$r.jsonl" | diff "$WORK/r0.losses" - || { echo "FAIL: $family: losses of --recompute $r differ from 0"; exit 1; }
    cmp "$WORK/r0.ckpt" "$WORK/r$r.ckpt" || { echo "FAIL: $family: checkpoints of --recompute $r and 0 differ"; exit 1; }
    echo "$family --recompute $r: 10 losses identical to --recompute 0, final checkpoint byte-identical ($(stat -c %s "$WORK/r$r.ckpt") bytes)"
  done
  # Not part of the checkpoint's match checks: 5 steps with 0, resumed with 2, end where 0 ends.
  xt_run mpi 2 "${ARGS[@]}" "${FAM[@]}" --recompute 0 --stop-after 5 --ckpt "$WORK/mixed.ckpt" > "$WORK/half1.log" 2>&1 \
    || { cat "$WORK/half1.log"; echo "FAIL: $family: first half"; exit 1; }
  xt_run mpi 2 "${ARGS[@]}" "${FAM[@]}" --recompute 2 --resume "$WORK/mixed.ckpt" --ckpt "$WORK/mixed.ckpt" > "$WORK/half2.log" 2>&1 \
    || { cat "$WORK/half2.log"; echo "FAIL: $family: resume with another --recompute"; exit 1; }
  cmp "$WORK/r0.ckpt" "$WORK/mixed.ckpt" || { echo "FAIL: $family: 5 steps with 0 + 5 with 2 differ from 10 with 0"; exit 1; }
  echo "$family: 5 steps with --recompute 0, resumed for 5 with 2: final checkpoint byte-identical to 10 with 0"
done
# compared across ranks like every option (MPMD command lines differing only in --recompute)
set +e
"${MPIRUN[@]}" -np 1 "$XT" "${ARGS[@]}" --recompute 0 : -np 1 "$XT" "${ARGS[@]}" --recompute 1 > "$WORK/mpmd.log" 2>&1
rc=$?
"$XT" "${ARGS[@]}" --recompute 3 > "$WORK/bad.log" 2>&1
bad_rc=$?
set -e
grep -q "the options differ across ranks: --recompute 1 on rank 1 but --recompute 0 on rank 0" "$WORK/mpmd.log" && [[ $rc != 0 ]] \
  || { cat "$WORK/mpmd.log"; echo "FAIL: --recompute differing across ranks not refused (rc $rc)"; exit 1; }
grep -q "usage error: --recompute must be 0, 1 or 2" "$WORK/bad.log" && [[ $bad_rc == 2 ]] \
  || { cat "$WORK/bad.log"; echo "FAIL: --recompute 3 not a usage error (rc $bad_rc)"; exit 1; }
echo "--recompute differing across ranks and --recompute 3 refused"
