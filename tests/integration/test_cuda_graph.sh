#!/usr/bin/env bash
# --cuda-graph: the step's forward and backward recorded as a CUDA graph at step 2 and
# launched from then on give the losses of launching every kernel exactly (metrics text) and a
# byte-identical final checkpoint, in bf16 and fp32, with --recompute 2, with --optimizer muon, with the head and the
# loss in chunks of rows (--logits-chunk-rows) and with validation passes
# between steps (they use the batch and loss buffers the graph reads): on one GPU with --cuda-graph auto
# and on, and, where two GPUs are visible, at world 2 with --cuda-graph on (the bucketed NCCL gradient
# all-reduce recorded inside the graph; several buckets, one bucket, --bucket-mb 0), under mpirun and
# xtrain_threads. Where the step does not allow a graph (--grad-accum 2, --dropout, --timeline; several
# ranks under auto) the run says why in one line and trains as before; --cuda-graph takes only auto, on
# or off. Exit 77 (skipped) without a GPU.
source "$(dirname "$0")/common.sh"
nvidia-smi -L > /dev/null 2>&1 || { echo "SKIP: no GPU visible"; exit 77; }
xt_data
# --val-seqs 20 with --batch 16: validation runs a forward of 16 sequences, then one of 4, between launches of
# the recorded 16-sequence step (the loss read after a launch must cover its 16, not the last forward's 4)
ARGS=("${DATA[@]}" --dim 128 --heads 4 --layers 2 --seq 128 --batch 16 --steps 12 --lr 3e-3 --warmup 3
      --val-every 5 --val-seqs 20 --log-every 4 --device cuda)
check_same() {  # check_same NAME LAUNCHER NP MODE ARGS...: --cuda-graph MODE vs off
  local name=$1 launcher=$2 np=$3 mode=$4
  shift 4
  for g in "$mode" off; do
    xt_run_ok "$name.$g" "$launcher" "$np" "${ARGS[@]}" "$@" --cuda-graph "$g" --ckpt "$WORK/$name.$g.ckpt" \
      --metrics "$WORK/$name.$g.jsonl"
  done
  local want="cuda graph: step 2's forward and backward recorded"
  ((np > 1)) && want="cuda graph: step 2's forward and backward with the gradient all-reduce recorded"
  grep -q "$want" "$WORK/$name.$mode.log" \
    || { cat "$WORK/$name.$mode.log"; fatal "$name: no graph recorded"; }
  ! grep "cuda graph" "$WORK/$name.off.log" || fatal "$name: --cuda-graph off printed a graph line"
  same_losses "$name.$mode.jsonl" "$name.off.jsonl" 1 12 \
    || fatal "$name: the 12 losses with the graph differ from launching every kernel"
  cmp "$WORK/$name.$mode.ckpt" "$WORK/$name.off.ckpt" || fatal "$name: checkpoints differ"
  grep -q '"type": *"val"' "$WORK/$name.$mode.jsonl" || fatal "$name: no validation record"
  cmp <(grep '"val"' "$WORK/$name.$mode.jsonl") <(grep '"val"' "$WORK/$name.off.jsonl") \
    || fatal "$name: validation losses differ"
  echo "$name: 12 losses, validation and the final checkpoint identical with and without the CUDA graph"
}
check_same bf16 mpi 1 auto --dtype bf16
check_same fp32 mpi 1 auto --dtype fp32
check_same recompute2 mpi 1 auto --dtype bf16 --recompute 2
# 2048 rows a step in 7 chunks (6 of 300, one of 248), validation's 2048 and 512 rows likewise: the chunk loop recorded
check_same chunks mpi 1 auto --dtype bf16 --logits-chunk-rows 300
check_same bf16-on mpi 1 on --dtype bf16
# Muon runs after the recorded step, as AdamW does: its state and updates the same bits (checkpoints included)
check_same muon mpi 1 auto --dtype bf16 --optimizer muon --lr-schedule wsd
ngpu=$(nvidia-smi -L | grep -c '^GPU ')
if ((ngpu >= 2)); then
  # 0.3 MiB buckets: several for this model (a layer is 0.75 MiB, the tied embedding 24.6 MiB)
  check_same w2-buckets mpi 2 on --dtype bf16 --bucket-mb 0.3
  check_same w2-fp32 mpi 2 on --dtype fp32
  check_same w2-one mpi 2 on --dtype bf16 --bucket-mb 0
  check_same w2-threads threads 2 on --dtype bf16 --bucket-mb 0.3
  check_same w2-chunks mpi 2 on --dtype bf16 --bucket-mb 0.3 --logits-chunk-rows 300
  xt_run_ok w2auto mpi 2 "${ARGS[@]}"
  grep -qF "cuda graph: not used (several ranks: --cuda-graph on records their step too)" "$WORK/w2auto.log" \
    || { grep "cuda graph" "$WORK/w2auto.log"; fatal "world 2 auto: no line saying why there is no graph"; }
  echo "world 2, --cuda-graph auto: no graph (the run says why), trained"
else
  echo "world 2 cases skipped: $ngpu GPU visible"
fi
for case in "--grad-accum 2|--grad-accum > 1" "--dropout 0.1|--dropout > 0" "--timeline $WORK/tl.json|--timeline"; do
  extra=${case%%|*} reason=${case#*|}
  read -r -a e <<<"$extra"
  xt_run_ok noelig mpi 1 "${ARGS[@]}" "${e[@]}"
  ! grep -q "recorded" "$WORK/noelig.log" || fatal "$extra recorded a graph"
  grep -qF "cuda graph: not used ($reason" "$WORK/noelig.log" \
    || { grep "cuda graph" "$WORK/noelig.log"; fatal "$extra: no line saying why there is no graph"; }
  echo "$extra: no graph (the run says why), trained"
done
set +e
"$XT" "${ARGS[@]}" --cuda-graph yes > "$WORK/bad.log" 2>&1
rc=$?
set -e
grep -q "usage error: --cuda-graph must be auto, on or off" "$WORK/bad.log" && [[ $rc == 2 ]] \
  || { cat "$WORK/bad.log"; fatal "--cuda-graph yes not a usage error (rc $rc)"; }
echo "--cuda-graph yes refused"
