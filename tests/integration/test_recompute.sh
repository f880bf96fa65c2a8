#!/usr/bin/env bash
# Activation recompute: --recompute 1 (GELU or SwiGLU) and 2 (also the norms) run the forward's own
# ops on the forward's inputs in the backward, so 10 steps give the losses of --recompute 0 exactly
# (metrics text) and byte-identical final checkpoints (parameters and AdamW state). With dropout and
# grad accumulation, on 2 ranks, for each model family (common.sh). A checkpoint resumes under another
# setting; the option is compared across ranks like every other, and a value outside auto, 0..2 is a usage error.
source "$(dirname "$0")/common.sh"
xt_data
ARGS=("${DATA[@]}" "${TINY[@]}" --steps 10 --dropout 0.1 --grad-accum 2)
for family in "${XT_FAMILIES[@]}"; do
  xt_family "$family"
  for r in 0 1 2; do
    xt_run_ok "r$r" mpi 2 "${ARGS[@]}" "${FAM[@]}" --recompute "$r" --ckpt "$WORK/r$r.ckpt" --metrics "$WORK/r$r.jsonl"
  done
  for r in 1 2; do
    same_losses r0.jsonl "r$r.jsonl" 1 10 || fatal "$family: the 10 losses of --recompute $r differ from 0"
    cmp "$WORK/r0.ckpt" "$WORK/r$r.ckpt" || fatal "$family: checkpoints of --recompute $r and 0 differ"
    echo "$family --recompute $r: 10 losses identical to --recompute 0, final checkpoint byte-identical ($(stat -c %s "$WORK/r$r.ckpt") bytes)"
  done
  # Not part of the checkpoint's match checks: 5 steps with 0, resumed with 2, end where 0 ends.
  xt_run_ok half1 mpi 2 "${ARGS[@]}" "${FAM[@]}" --recompute 0 --stop-after 5 --ckpt "$WORK/mixed.ckpt"
  xt_run_ok half2 mpi 2 "${ARGS[@]}" "${FAM[@]}" --recompute 2 --resume "$WORK/mixed.ckpt" --ckpt "$WORK/mixed.ckpt"
  cmp "$WORK/r0.ckpt" "$WORK/mixed.ckpt" || fatal "$family: 5 steps with 0 + 5 with 2 differ from 10 with 0"
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
  || { cat "$WORK/mpmd.log"; fatal "--recompute differing across ranks not refused (rc $rc)"; }
grep -q "usage error: --recompute must be auto, 0, 1 or 2" "$WORK/bad.log" && [[ $bad_rc == 2 ]] \
  || { cat "$WORK/bad.log"; fatal "--recompute 3 not a usage error (rc $bad_rc)"; }
echo "--recompute differing across ranks and --recompute 3 refused"
