#!/usr/bin/env bash
# Checkpoints keep the optimizer and its state, and the wsd schedule extends. With --optimizer muon and
# --lr-schedule wsd (the gates with muon: test_gates.sh llama muon):
# - a run stopped at step 6 by mpirun ranks and resumed by xtrain_threads ranks (world 2 both) trains steps
#   7-12 bitwise as the run straight through (Muon's momentum buffers and AdamW's moments restored);
# - resumed at world 1 it trains what world 2 trains (gate 1, gate_compare.py's tolerance);
# - resuming with --optimizer adamw is refused in one line naming both optimizers;
# - a wsd run of 12 steps stopped in its stable phase and resumed with --steps 24 is bitwise the run of 24
#   steps straight: the stable phase goes on and the decay is planned again at the new end;
# - a format-03 checkpoint (an xtrain of before the optimizer's fields) resumes as AdamW, bitwise as its
#   format-04 twin.
source "$(dirname "$0")/common.sh"
xt_data
CMP="$(dirname "$0")/gate_compare.py"
ARGS=("${DATA[@]}" "${TINY[@]}" --arch llama --tie-embeddings false --optimizer muon --lr-schedule wsd
      --decay-frac 0.25)

# straight through, and stopped at step 6 (mpirun) then resumed (threads)
xt_run_ok ref threads 2 "${ARGS[@]}" --steps 12 --metrics "$WORK/ref.jsonl"
xt_run_ok a mpi 2 "${ARGS[@]}" --steps 12 --stop-after 6 --ckpt "$WORK/a.ckpt" --metrics "$WORK/a.jsonl"
[[ "$(forge "$WORK/a.ckpt" --get optimizer)" == 1 && "$(forge "$WORK/a.ckpt" --get muon_count)" -gt 0 ]] ||
  fail "the checkpoint does not hold Muon and its momentum"
xt_run_ok b threads 2 "${DATA[@]}" --resume "$WORK/a.ckpt" --ckpt "$WORK/b.ckpt" --metrics "$WORK/b.jsonl" --val-every 0 --log-every 1
grep -q "resumed from $WORK/a.ckpt at step 6" "$WORK/b.log" || { cat "$WORK/b.log"; fail "no resume line"; }
check "losses of steps 7-12 identical (ref.jsonl, b.jsonl)" same_losses ref.jsonl b.jsonl 7 12
# at world 1: within gate 1 of world 2 (steps 7-12)
xt_run_ok c mpi 1 "${DATA[@]}" --resume "$WORK/a.ckpt" --metrics "$WORK/c.jsonl" --val-every 0 --log-every 1
python3 "$CMP" "$WORK/b.jsonl" "$WORK/c.jsonl" --min-steps 6 --label "muon resumed: world 1 vs world 2"

# another optimizer: refused in one line, exit 1, nothing trained
set +e
xt_run mpi 1 "${DATA[@]}" --resume "$WORK/a.ckpt" --optimizer adamw --val-every 0 > "$WORK/other.log" 2>&1
rc=$?
set -e
want="--optimizer is muon in the checkpoint, adamw now"
[[ $rc == 1 ]] && grep -q -- "$want" "$WORK/other.log" && [[ "$(grep -c -- "$want" "$WORK/other.log")" == 1 ]] &&
  ! grep -q "^step " "$WORK/other.log" ||
  { cat "$WORK/other.log"; fail "resuming with another optimizer: exit $rc, want 1 and one line '$want'"; }
echo "another --optimizer refused: $(grep -- "$want" "$WORK/other.log")"

# wsd extended in its stable phase (12 steps: decay after step 9; stopped at 6) = 24 steps straight
xt_run_ok long mpi 2 "${ARGS[@]}" --steps 24 --metrics "$WORK/long.jsonl"
xt_run_ok ext mpi 2 "${DATA[@]}" --resume "$WORK/a.ckpt" --steps 24 --metrics "$WORK/ext.jsonl" --val-every 0 --log-every 1
grep -q "the stable phase goes on" "$WORK/ext.log" || { cat "$WORK/ext.log"; fail "no re-planned decay"; }
check "losses of steps 7-24 identical (long.jsonl, ext.jsonl)" same_losses long.jsonl ext.jsonl 7 24
python3 - "$WORK/ext.jsonl" <<'PY'
import json, sys
lr = {r["step"]: r["lr"] for r in map(json.loads, open(sys.argv[1])) if r["type"] == "train"}
peak = lr[7]  # decay over the last round(0.25 * 24) = 6 steps: stable to step 18, 3e-4 at step 24
assert lr[18] == peak and lr[19] < peak and abs(lr[24] - 0.1 * peak) < 1e-9, lr
print(f"wsd extended: lr {peak:g} to step 18, {lr[19]:g} at 19, {lr[24]:g} at 24")
PY

# a format-03 checkpoint of an AdamW run resumes as AdamW, as its format-04 twin
ADAM=("${DATA[@]}" "${TINY[@]}" --steps 8 --log-every 1)
xt_run_ok w mpi 1 "${ADAM[@]}" --stop-after 4 --ckpt "$WORK/w.ckpt"
forge "$WORK/w.ckpt" w03.ckpt format=03 body=keep
[[ "$(head -c 8 "$WORK/w03.ckpt")" == XTCKPT03 ]] || fail "forge format=03"
xt_run_ok r04 mpi 1 "${DATA[@]}" --resume "$WORK/w.ckpt" --metrics "$WORK/r04.jsonl" --val-every 0 --log-every 1
xt_run_ok r03 mpi 1 "${DATA[@]}" --resume "$WORK/w03.ckpt" --metrics "$WORK/r03.jsonl" --val-every 0 --log-every 1
check "losses of steps 5-8 identical (r04.jsonl, r03.jsonl)" same_losses r04.jsonl r03.jsonl 5 8
xt_finish
