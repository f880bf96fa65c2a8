#!/usr/bin/env bash
# --resume takes the model, batch and schedule options from the checkpoint, and a larger --steps
# extends a finished run. With --min-lr-frac 1 the LR is flat after warmup, so 8 steps extended to 12
# must be bitwise 12 steps straight: the step counter, the data position (batches keyed by step), the
# AdamW moments and the dropout streams all continue. Also across a world-size change (world 1 then 2,
# against the plain resume of that change) and through a checkpoint written during the extension.
source "$(dirname "$0")/common.sh"
xt_data
ARGS=("${DATA[@]}" "${TINY[@]}" --min-lr-frac 1 --dropout 0.1 --grad-accum 2)
RESUME_ARGS=("${DATA[@]}" --val-every 0 --log-every 1)  # data options only: the rest is the checkpoint's
# same_state A B STEPS_A STEPS_B: equal checkpoints but for the schedule length (total_steps)
same_state() {
  python3 - "$WORK/$1" "$WORK/$2" "$3" "$4" <<'PY'
import struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
at = 8 + 4 + 8 * 4 + 3 * 4  # magic, header size, the 8 model fields, step, batch, grad_accum
sa, sb = (struct.unpack_from("<i", x, at)[0] for x in (a, b))
assert (sa, sb) == (int(sys.argv[3]), int(sys.argv[4])), f"schedule lengths {sa}, {sb}"
assert len(a) == len(b) and a[:at] == b[:at] and a[at + 4:-8] == b[at + 4:-8], "checkpoints differ past the schedule length"
print(f"checkpoints equal but for total_steps ({sa} vs {sb}): step, parameters, AdamW moments")
PY
}

xt_run_ok ref mpi 2 "${ARGS[@]}" --steps 12 --ckpt "$WORK/ref.ckpt" --metrics "$WORK/ref.jsonl"
xt_run_ok a1 mpi 2 "${ARGS[@]}" --steps 8 --ckpt "$WORK/a.ckpt" --metrics "$WORK/a.jsonl"
# finished at 8: extend to 12, in two jobs (the first stops after 2 steps, writing its checkpoint)
xt_run_ok a2 mpi 2 "${RESUME_ARGS[@]}" --resume "$WORK/a.ckpt" --ckpt "$WORK/a.ckpt" --steps 12 --stop-after 2 --metrics "$WORK/a.jsonl"
grep -q "resumed from .* at step 8 (extended to --steps 12" "$WORK/a2.log" || { cat "$WORK/a2.log"; fail "no extension line"; }
grep -q "^step     9/12 | loss" "$WORK/a2.log" || { cat "$WORK/a2.log"; fail "the extension did not start at step 9"; }
# the checkpoint at step 10 is past its schedule of 8 steps: without --steps, a usage error naming it
set +e
xt_run mpi 2 "${RESUME_ARGS[@]}" --resume "$WORK/a.ckpt" --ckpt "$WORK/a.ckpt" > "$WORK/a_err.log" 2>&1
rc=$?
set -e
[[ $rc == 2 ]] && grep -q "usage error: --resume .* is at step 10, past its LR schedule of 8 steps (an extended run): give --steps" "$WORK/a_err.log" ||
  { cat "$WORK/a_err.log"; fail "resume past the schedule without --steps (exit $rc)"; }
echo "resume past the schedule without --steps: exit 2, naming --steps"
xt_run_ok a3 mpi 2 "${RESUME_ARGS[@]}" --resume "$WORK/a.ckpt" --ckpt "$WORK/a.ckpt" --steps 12 --metrics "$WORK/a.jsonl"
grep -q "resumed from .* at step 10" "$WORK/a3.log" || { cat "$WORK/a3.log"; fatal "a3: no resume line"; }
check "losses of steps 1-12 identical (ref.jsonl, a.jsonl)" same_losses ref.jsonl a.jsonl 1 12
same_state a.ckpt ref.ckpt 8 12

# world 1 for 8 steps, then world 2: the extension equals the plain resume of the same change
xt_run_ok b1 mpi 1 "${ARGS[@]}" --steps 8 --ckpt "$WORK/b.ckpt" --metrics "$WORK/b.jsonl"
xt_run_ok b2 mpi 2 "${RESUME_ARGS[@]}" --resume "$WORK/b.ckpt" --ckpt "$WORK/b.ckpt" --steps 12 --metrics "$WORK/b.jsonl"
xt_run_ok c1 mpi 1 "${ARGS[@]}" --steps 12 --stop-after 8 --ckpt "$WORK/c.ckpt" --metrics "$WORK/c.jsonl"
xt_run_ok c2 mpi 2 "${RESUME_ARGS[@]}" --resume "$WORK/c.ckpt" --ckpt "$WORK/c.ckpt" --metrics "$WORK/c.jsonl"
grep -q "^step     9/12 | loss" "$WORK/b2.log" || { cat "$WORK/b2.log"; fail "world 2 extension did not start at step 9"; }
check "losses of steps 1-12 identical (b.jsonl, c.jsonl)" same_losses b.jsonl c.jsonl 1 12
same_state b.ckpt c.ckpt 8 12

# a llama checkpoint resumes as llama from --resume alone: the family, the untied head, the RMSNorm eps and the
# rotary base come from the checkpoint; the resumed steps equal the same run straight (losses bitwise)
LLAMA=("${DATA[@]}" "${TINY[@]}" --log-every 1 --arch llama --tie-embeddings false --norm-eps 1e-6 --rope-theta 500000)
xt_run_ok l_ref mpi 2 "${LLAMA[@]}" --steps 4 --metrics "$WORK/l_ref.jsonl"
xt_run_ok l1 mpi 2 "${LLAMA[@]}" --steps 4 --stop-after 2 --ckpt "$WORK/l.ckpt" --metrics "$WORK/l.jsonl"
xt_run_ok l2 mpi 2 "${RESUME_ARGS[@]}" --resume "$WORK/l.ckpt" --metrics "$WORK/l.jsonl"
grep -q "arch=llama norm_eps=1e-06 rope_theta=500000 tied=0" "$WORK/l2.log" || { cat "$WORK/l2.log"; fail "llama settings not taken from the checkpoint"; }
check "losses of steps 1-4 identical (l_ref.jsonl, l.jsonl)" same_losses l_ref.jsonl l.jsonl 1 4
echo "llama checkpoint resumed from --resume alone: llama, untied, eps and theta from the checkpoint; losses bitwise"
xt_finish
