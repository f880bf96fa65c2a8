#!/usr/bin/env bash
# Time to a validation loss on one GPU, xtrain against PyTorch in the same call: Brown (data/brown.txt,
# GPT-2 BPE) as one llm.c token shard, the last 10% held out, validation on its first 64 windows every 25
# steps and at the end; linear warmup, cosine decay to 0.1 x the peak, clipping at 1.0, bf16.
#   CONFIG=small (default): GPT-2 layout, L=6 C=384 NH=6, T=256, B=32, 600 steps, 30 warmup steps
#   CONFIG=gpt2: GPT-2 124M's shape, L=12 C=768 NH=12, T=1024, B=8, 600 steps, 30 warmup steps
# Runs, each at every learning rate of its grid: xtrain --optimizer adamw (--lr: ADAMW_LRS) and --optimizer
# muon (--muon-lr: MUON_LRS, --lr: MUON_ADAMW_LRS for the other tensors, every pair), then, where python3 has
# torch >= 2.9 and a GPU, bench/time_to_loss.py train: torch.compile with AdamW (ADAMW_LRS) and with
# torch.optim.Muon (every pair of MUON_LRS and MUON_ADAMW_LRS; q, k, v as separate matrices, as xtrain
# orthogonalizes them; AdamW on the rest). A Muon run's file and table row name its pair as MUON_LR,ADAMW_LR.
# Then bench/time_to_loss.py table: each run's best learning rate(s) by final val loss; its final val loss; the
# steps and training wall seconds (validation excluded, the first step counted at the median step) to reach
# xtrain AdamW's final val loss; and the goals (muon in <= 0.55x the steps and 0.6x the time of xtrain AdamW,
# its final val loss within 0.02 of torch.optim.Muon's or below, <= 0.4x torch.compile AdamW's time).
# MUON_STEPS: the lengths Muon's runs are planned for (default STEPS; e.g. "600 330"), distinct positive integers
# <= STEPS, STEPS among them: the schedule's cosine ends at each run's own last step, as a user who plans a
# shorter run would set it; a run planned for fewer steps than STEPS is named with @STEPS (xt-muon-0.02,3e-3@330)
# and counts for the steps and time to the target only (the final-loss comparisons take the full-length runs,
# hence STEPS among them).
# XTRAIN=0 skips xtrain's runs and keeps those an earlier invocation left in the same LOGDIR (so PyTorch's grid can
# be smaller than xtrain's: the table reads every run in the folder); it needs LOGDIR set. PYTORCH=auto runs
# PyTorch's grid where PY has torch.optim.Muon and a GPU, 1 requires them, 0 skips it.
# Usage: CONFIG=small bench/time_to_loss.sh   (env: BIN=build-gpu DATA=data LOGDIR=<tmp> PY=python3
#        ADAMW_LRS="6e-4 1.5e-3 3e-3" MUON_LRS="0.01 0.02 0.04" MUON_ADAMW_LRS=3e-3 STEPS=600 VAL_EVERY=25
#        MUON_STEPS=$STEPS PYTORCH=auto XTRAIN=1)
# Exits 1 when a run failed, 2 on a bad setting (one line on stderr, before any run; the table's own refusals,
# such as a run file it cannot read, exit 2 too).
set -euo pipefail

: "${BIN:=build-gpu}" "${CONFIG:=small}" "${STEPS:=600}" "${PYTORCH:=auto}" "${VAL_EVERY:=25}" "${XTRAIN:=1}"
source "$(dirname "$0")/common.sh"
xt_help "$@"
: "${ADAMW_LRS:=6e-4 1.5e-3 3e-3}" "${MUON_LRS:=0.01 0.02 0.04}" "${MUON_ADAMW_LRS:=3e-3}" "${MUON_STEPS:=$STEPS}"
# The settings, checked before anything runs: one line on stderr and exit 2 for a bad one.
bad() { echo "time_to_loss.sh: $*" >&2; exit 2; }
[[ $STEPS =~ ^[1-9][0-9]*$ ]] || bad "STEPS must be a positive integer (got '$STEPS')"
read -r -d '' -a MUON_STEPS_LIST <<<"$MUON_STEPS" || true  # its words, split on any blank (no globbing)
[[ ${#MUON_STEPS_LIST[@]} -gt 0 ]] || bad "MUON_STEPS must name at least one run length, STEPS ($STEPS) among them"
seen=" "
for n in "${MUON_STEPS_LIST[@]}"; do
  [[ $n =~ ^[1-9][0-9]*$ && $n -le $STEPS ]] ||
    bad "each of MUON_STEPS must be a positive integer <= STEPS ($STEPS) (got '$n')"
  [[ $seen != *" $n "* ]] || bad "MUON_STEPS names $n twice (got '${MUON_STEPS_LIST[*]}')"
  seen+="$n "
done
[[ $seen == *" $STEPS "* ]] || bad "MUON_STEPS must include STEPS ($STEPS): the final-loss comparisons take the" \
  "full-length runs (got '${MUON_STEPS_LIST[*]}')"
[[ $XTRAIN == 0 || $XTRAIN == 1 ]] || bad "XTRAIN must be 0 or 1 (got '$XTRAIN')"
[[ $PYTORCH == auto || $PYTORCH == 0 || $PYTORCH == 1 ]] || bad "PYTORCH must be auto, 0 or 1 (got '$PYTORCH')"
[[ $XTRAIN == 1 || -n ${LOGDIR:-} ]] ||
  bad "XTRAIN=0 keeps the xtrain runs of an earlier invocation: set LOGDIR to its folder"
case "$CONFIG" in
  small) MODEL=(--dim 384 --heads 6 --layers 6 --seq 256 --batch 32) ;;
  gpt2) MODEL=(--dim 768 --heads 12 --layers 12 --seq 1024 --batch 8) ;;
  *) bad "CONFIG must be small or gpt2 (got '$CONFIG')" ;;
esac
xt_require_bin "$BIN"
# pytorch: 1 where PyTorch's grid runs (PYTORCH=1 without it is a bad setting)
pytorch=0
if [[ $PYTORCH != 0 ]] &&
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() and hasattr(torch.optim, "Muon") else 1)' 2>/dev/null; then
  pytorch=1
fi
[[ $PYTORCH != 1 || $pytorch == 1 ]] || bad "PYTORCH=1 but $PY has no torch with CUDA and torch.optim.Muon"
# run_name STEPS: "" for a full-length run, "@STEPS" for one planned shorter
run_name() { [[ $1 == "$STEPS" ]] || echo "@$1"; }
xt_logdir
RUNS="$LOGDIR/runs-$CONFIG"
mkdir -p "$RUNS"
SHARD="$LOGDIR/brown"
[[ -f ${SHARD}_000000.bin ]] ||
  "$BIN/xtrain_tokenize" --input "$DATA/brown.txt" --encoder-json "$DATA/gpt2/encoder.json" \
    --vocab-bpe "$DATA/gpt2/vocab.bpe" --shard-tokens 100000000 --output "$SHARD" > "$LOGDIR/tokenize.log"
COMMON=(--data "${SHARD}_000000.bin" --encoder-json "$DATA/gpt2/encoder.json" --vocab-bpe "$DATA/gpt2/vocab.bpe"
        "${MODEL[@]}" --warmup 30 --val-every "$VAL_EVERY" --val-seqs 64 --log-every 100 --device cuda)
failed=0
[[ $XTRAIN == 0 ]] && xt_adamw_lrs="" xt_muon_lrs="" || xt_adamw_lrs=$ADAMW_LRS xt_muon_lrs=$MUON_LRS
for lr in $xt_adamw_lrs; do
  mpirun --allow-run-as-root -np 1 "$BIN/xtrain_mpi" "${COMMON[@]}" --steps "$STEPS" --optimizer adamw --lr "$lr" --metrics "$RUNS/xt-adamw-$lr.jsonl" \
    > "$RUNS/xt-adamw-$lr.log" 2>&1 || { echo "xtrain adamw lr $lr failed: $RUNS/xt-adamw-$lr.log"; failed=1; }
done
for lr in $xt_muon_lrs; do
  for alr in $MUON_ADAMW_LRS; do
    for n in "${MUON_STEPS_LIST[@]}"; do
      f="$RUNS/xt-muon-$lr,$alr$(run_name "$n")"
      mpirun --allow-run-as-root -np 1 "$BIN/xtrain_mpi" "${COMMON[@]}" --steps "$n" --optimizer muon --muon-lr "$lr" --lr "$alr" \
        --metrics "$f.jsonl" > "$f.log" 2>&1 || { echo "xtrain muon lr $lr,$alr, $n steps failed: $f.log"; failed=1; }
    done
  done
done
if [[ $pytorch == 1 ]]; then
  PTM=("${MODEL[@]}" --warmup 30 --val-every "$VAL_EVERY" --val-seqs 64 --shard "${SHARD}_000000.bin")
  for lr in $ADAMW_LRS; do
    "$PY" "$XT_BENCH_DIR/time_to_loss.py" train "${PTM[@]}" --steps "$STEPS" --optimizer adamw --lr "$lr" --out "$RUNS/pt-adamw-$lr.jsonl" \
      > "$RUNS/pt-adamw-$lr.log" 2>&1 || { echo "torch adamw lr $lr failed: $RUNS/pt-adamw-$lr.log"; failed=1; }
  done
  for lr in $MUON_LRS; do
    for alr in $MUON_ADAMW_LRS; do
      for n in "${MUON_STEPS_LIST[@]}"; do
        f="$RUNS/pt-muon-$lr,$alr$(run_name "$n")"
        "$PY" "$XT_BENCH_DIR/time_to_loss.py" train "${PTM[@]}" --steps "$n" --optimizer muon --muon-lr "$lr" --lr "$alr" \
          --out "$f.jsonl" > "$f.log" 2>&1 || { echo "torch muon lr $lr,$alr, $n steps failed: $f.log"; failed=1; }
      done
    done
  done
fi
"$PY" "$XT_BENCH_DIR/time_to_loss.py" table "$RUNS" --label "$CONFIG: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
exit $failed
