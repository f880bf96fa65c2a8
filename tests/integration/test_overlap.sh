#!/usr/bin/env bash
# The bucketed gradient all-reduce trains exactly what the single all-reduce trains:
# --bucket-mb 0.05 (many buckets, started during the backward pass) against --bucket-mb 0 (one
# all-reduce after it), with grad-accum 2, at world 2 and 3 under mpirun and under xtrain_threads.
# Bitwise: every step's loss (as written to the metrics file, a round-trip double) and the final
# checkpoint bytes must be equal.
source "$(dirname "$0")/common.sh"
xt_data
# 4 layers: the tiny model then has 4 buckets of >= 0.05 MiB (lnf + layers 3..2, layers 1..0, wpe, wte)
ARGS=("${DATA[@]}" "${TINY[@]}" --layers 4 --batch 12 --grad-accum 2 --steps 6 --log-every 3)
run() {  # run LAUNCHER NP BUCKET_MB NAME
  xt_run_ok "$4" "$1" "$2" "${ARGS[@]}" --bucket-mb "$3" --metrics "$WORK/$4.jsonl" --ckpt "$WORK/$4.ckpt"
}
for launcher in mpi threads; do
  for np in 2 3; do
    run "$launcher" "$np" 0 "$launcher$np-single"
    run "$launcher" "$np" 0.05 "$launcher$np-buckets"
    grep -q "gradient all-reduce: [2-9][0-9]* buckets" "$WORK/$launcher$np-buckets.log" ||
      { grep "gradient all-reduce" "$WORK/$launcher$np-buckets.log"; fail "$launcher world $np: not several buckets"; }
    same_losses "$launcher$np-single.jsonl" "$launcher$np-buckets.jsonl" 1 6 || fail "$launcher world $np: losses differ"
    cmp "$WORK/$launcher$np-single.ckpt" "$WORK/$launcher$np-buckets.ckpt" || fail "$launcher world $np: final checkpoints differ"
    echo "$launcher world $np: $(grep -o '[0-9]* buckets' "$WORK/$launcher$np-buckets.log") == one all-reduce, bitwise" \
      "(losses $(xt_losses "$WORK/$launcher$np-single.jsonl" | cut -d' ' -f2 | tr '\n' ' '))"
  done
done
xt_finish
