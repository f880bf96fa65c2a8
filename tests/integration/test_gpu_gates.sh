#!/usr/bin/env bash
# GPU gates: NCCL world 2 (4, 8 where that many GPUs are visible) trains what world 1
# trains, under mpirun (one process per GPU) and under xtrain_threads (one thread per GPU), in fp32
# and bf16, with grouped-query attention, dropout and grad accumulation, for each model family
# (common.sh's XT_FAMILIES): loss < 1e-3 relative at every step and parameters equal across ranks
# (< 1e-6), by gate_compare.py. And placement: the table rank
# 0 prints puts rank r on visible GPU r (PCI bus id as nvidia-smi lists it, CUDA_DEVICE_ORDER=PCI_BUS_ID).
# Exit 77 (skipped) unless at least 2 GPUs are visible. Usage: test_gpu_gates.sh [OUTDIR] (keeps logs).
source "$(dirname "$0")/common.sh"
CMP="$(dirname "$0")/gate_compare.py"
export CUDA_DEVICE_ORDER=PCI_BUS_ID  # CUDA's device order = nvidia-smi's, so bus ids can be expected

# bus ids of the visible GPUs, in CUDA order: nvidia-smi's rows, filtered by CUDA_VISIBLE_DEVICES
# (indices only) where it is set. "00000000:19:00.0" -> "19:00.0" (domains are printed differently).
mapfile -t ALL < <(nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader 2>/dev/null || true)
BUS=()
if [[ -n "${CUDA_VISIBLE_DEVICES+x}" ]]; then
  IFS=, read -ra want <<<"$CUDA_VISIBLE_DEVICES"
  for i in "${want[@]}"; do
    [[ "$i" =~ ^[0-9]+$ ]] || { echo "SKIP: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES is not a list of indices"; exit 77; }
    for row in "${ALL[@]}"; do [[ "${row%%,*}" == "$i" ]] && BUS+=("$(echo "${row#*,}" | tr -d ' ' | tr A-F a-f)"); done
  done
else
  for row in "${ALL[@]}"; do BUS+=("$(echo "${row#*,}" | tr -d ' ' | tr A-F a-f)"); done
fi
NGPU=${#BUS[@]}
((NGPU >= 2)) || { echo "SKIP: $NGPU GPU(s) visible, the gates need at least 2"; exit 77; }
xt_data
OUTD=${1:-$WORK}
mkdir -p "$OUTD"
echo "$NGPU GPUs visible: ${BUS[*]}"

GATE=(--dim 256 --heads 8 --kv-heads 4 --layers 4 --seq 256 --batch 32 --steps 20 --val-every 0 --log-every 10
      --lr 1e-3 --warmup 5 --dropout 0.1 --grad-accum 2 --device cuda)
run() {  # run LAUNCHER NP DTYPE -> $OUTD/<family>_<launcher>_<dtype>_w<np>.{jsonl,log}, family options in FAM
  local launcher=$1 np=$2 dtype=$3 out="$OUTD/${family}_$1_$3_w$2"
  xt_run "$launcher" "$np" "${DATA[@]}" "${GATE[@]}" "${FAM[@]}" --dtype "$dtype" --metrics "$out.jsonl" \
    > "$out.log" 2>&1 || { tail -n 20 "$out.log"; fatal "$family $launcher world $np $dtype"; }
}
check_placement() {  # check_placement LOG NP: rank r's device carries bus id BUS[r]
  local r bus bad=0
  for ((r = 0; r < $2; ++r)); do
    bus=$(awk -v r="$r" 'f && $1 == r { print $NF; exit } /^rank +host/ { f = 1 }' "$1" | tr -d '()' | tr A-F a-f)
    if [[ -z "$bus" || "${bus#*:}" != "${BUS[$r]#*:}" ]]; then
      fail "placement: $(basename "$1"): rank $r on '$bus', expected GPU $r at ${BUS[$r]}"
      bad=1
    fi
  done
  if ((bad == 0)); then echo "placement $(basename "$1"): rank r on GPU r (bus ${BUS[*]:0:$2}) PASS"; fi
}
for family in "${XT_FAMILIES[@]}"; do
  xt_family "$family"
  for dtype in fp32 bf16; do
    run mpi 1 "$dtype"
    for np in 2 4 8; do
      ((np <= NGPU)) || continue
      for launcher in mpi threads; do
        run "$launcher" "$np" "$dtype"
        python3 "$CMP" "$OUTD/${family}_mpi_${dtype}_w1.jsonl" "$OUTD/${family}_${launcher}_${dtype}_w$np.jsonl" \
          --label "$family $dtype $launcher world $np vs world 1" || fail "$family $dtype $launcher world $np vs world 1"
        check_placement "$OUTD/${family}_${launcher}_${dtype}_w$np.log" "$np"
      done
      python3 "$CMP" "$OUTD/${family}_mpi_${dtype}_w$np.jsonl" "$OUTD/${family}_threads_${dtype}_w$np.jsonl" \
        --label "$family $dtype world $np: threads vs processes" || fail "$family $dtype world $np: threads vs processes"
    done
  done
done
xt_finish "all GPU gates pass"
