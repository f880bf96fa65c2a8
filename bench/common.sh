# shellcheck shell=bash
# common.sh — sourced by the bench scripts: their shared environment defaults, the benchmark workloads
# (the one home of their model shapes, also read by bench/compare_pytorch.py through its arguments),
# the data and tokenizer arguments, one logged training run, and the steady-state figures of a metrics
# file (bench/steady.py). Each script sets its own BIN, STEPS and WARMUP defaults (they differ); DATA
# and PY given by the caller or set before sourcing are kept.

XT_BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export XT_BENCH_DIR  # for the scripts' inline Python: sys.path.insert(0, os.environ["XT_BENCH_DIR"])
: "${DATA:=data}" "${PY:=python3}"

# xt_help "$@": with -h or --help among the arguments, prints the calling script's header comment (its
# lines after the shebang up to the first line that is not a comment) and exits 0.
xt_help() {
  local a
  for a in "$@"; do
    if [[ $a == -h || $a == --help ]]; then
      sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
      exit 0
    fi
  done
}

# xt_require_bin DIR: exits 2 with a one-line error unless DIR/xtrain_mpi is an executable (a CUDA
# build: scripts/setup.sh builds into build/ where nvcc, NCCL and cuDNN are found, so BIN=build).
xt_require_bin() {
  [[ -x $1/xtrain_mpi ]] ||
    { echo "$(basename "$0"): $1/xtrain_mpi not found; set BIN to the CUDA build's directory (BIN=build after scripts/setup.sh found CUDA, or cmake -S . -B build-gpu -DXTRAIN_CUDA=ON)" >&2; exit 2; }
}

# xt_logdir: LOGDIR (default: a new temporary directory), created.
xt_logdir() {
  : "${LOGDIR:=$(mktemp -d)}"
  mkdir -p "$LOGDIR"
}

# XT_EXTRA_ARGS: EXTRA_ARGS (words on one line, e.g. "--cuda-graph off"; no globbing) put at the END of every
# xtrain command of the GPU scripts (bench_gpu.sh, profile_gpu.sh, trace_gpu.sh, recompute_gpu.sh), so a
# setting can be compared with the same script. xtrain takes an option's last value: an option given here
# overrides the script's own (e.g. --steps), and the records then describe the runs as made. Empty by default.
if [[ ${EXTRA_ARGS:-} == *$'\n'* ]]; then
  echo "$(basename "$0"): EXTRA_ARGS must be one line of words" >&2
  exit 2
fi
# shellcheck disable=SC2034  # used by the scripts that source this file
read -r -a XT_EXTRA_ARGS <<<"${EXTRA_ARGS:-}"

# XT_DATA_ARGS: the default corpus and GPT-2 BPE files under $DATA (scripts/setup.sh fetches them).
# shellcheck disable=SC2034  # used by the scripts that source this file
XT_DATA_ARGS=(--data "$DATA/brown.txt" --encoder-json "$DATA/gpt2/encoder.json" --vocab-bpe "$DATA/gpt2/vocab.bpe")

# xt_workload_model NAME: the model options of a workload, without the batch:
#   seed (= design): the design configuration, C=384 L=12 NH=12 HS=32 FFN=1536 T=256
#   gpt2_124m (= gpt2-124m): GPT-2 124M, C=768 L=12 NH=12 HS=64 FFN=3072 T=1024
#   smollm_135m: SmolLM-135M's shape, llama, C=576 L=30 NH=9 KVH=3 FFN=1536 T=2048, tied head (its
#                49,152-token vocabulary is not here: GPT-2's 50,257 stands in, in both programs)
#   llama32_1b: Llama-3.2-1B's shape, llama, C=2048 L=16 NH=32 KVH=8 FFN=8192 T=2048, theta 500000, tied head,
#               with Llama 3's tokenizer (V=128,256; xt_workload_tokenizer)
# Returns 2 on an unknown name, after a one-line error (so `m=$(xt_workload_model x)` stops a set -e script).
xt_workload_model() {
  case "$1" in
    seed | design) echo "--dim 384 --heads 12 --head-dim 32 --layers 12 --ffn 1536 --seq 256" ;;
    gpt2_124m | gpt2-124m) echo "--dim 768 --heads 12 --head-dim 64 --layers 12 --ffn 3072 --seq 1024" ;;
    smollm_135m) echo "--arch llama --dim 576 --heads 9 --kv-heads 3 --layers 30 --ffn 1536 --seq 2048" ;;
    llama32_1b) echo "--arch llama --dim 2048 --heads 32 --kv-heads 8 --layers 16 --ffn 8192 --seq 2048 --rope-theta 500000" ;;
    *) echo "bench: unknown workload '$1' (seed, design, gpt2_124m, gpt2-124m, smollm_135m, llama32_1b)" >&2; return 2 ;;
  esac
}

# xt_workload_args NAME: the model options and the one-GPU batch (sequences per step) of bench_gpu.sh.
xt_workload_args() {
  local model batch
  model=$(xt_workload_model "$1") || return 2
  case "$1" in
    seed | design) batch=32 ;;
    gpt2_124m | gpt2-124m) batch=16 ;;
    smollm_135m) batch=8 ;;
    llama32_1b) batch=4 ;;
  esac
  echo "$model --batch $batch"
}

# xt_workload_data NAME: the data and tokenizer options of a workload for xtrain: XT_DATA_ARGS, or the
# default corpus with the workload's own tokenizer. PyTorch's side takes the vocabulary size xtrain
# printed (bench_gpu.sh), not these.
xt_workload_data() {
  case "$1" in
    llama32_1b) echo "--data $DATA/brown.txt --tokenizer llama3 --tokenizer-ranks $DATA/tokenizers/llama3.tiktoken" ;;
    *) echo "${XT_DATA_ARGS[*]}" ;;
  esac
}

# xt_check_workloads NAME...: exits 2 (after xt_workload_model's one-line error) unless every name is a
# known workload, so a script refuses a bad list before running anything.
xt_check_workloads() {
  local w
  for w in "$@"; do
    xt_workload_args "$w" >/dev/null || exit 2
  done
}

# xt_step_cmd NAME: XT_CMD, the one-GPU xtrain command that profile_gpu.sh and trace_gpu.sh wrap (under Nsight
# Compute, with the CUPTI tracer): workload NAME in bf16 for STEPS steps, a step line each, EXTRA_ARGS last;
# and XT_STEP_LABEL, "NAME (its options)" plus ", with EXTRA_ARGS" where given, for the tools' headers.
xt_step_cmd() {
  local args data
  read -r -a args <<<"$(xt_workload_args "$1")"
  read -r -a data <<<"$(xt_workload_data "$1")"
  XT_CMD=("$BIN/xtrain_mpi" --device cuda --dtype bf16 "${args[@]}" "${data[@]}" --val-every 0
          --steps "$STEPS" --log-every 1 "${XT_EXTRA_ARGS[@]}")
  XT_STEP_LABEL="$1 (${args[*]})${XT_EXTRA_ARGS[*]:+, with ${XT_EXTRA_ARGS[*]}}"
}

# xt_quote WORD...: the words as one shell command line, each quoted only where it needs it
# (printf %q), so a path with spaces reads back as one word.
xt_quote() {
  local line
  line=$(printf '%q ' "$@")
  echo "${line% }"
}

# xt_error_line LOG: xtrain's own error line in a failed run's output, "rank R (host): <cause>" (the
# first rank-prefixed line that is not a warning; mpirun's lines around it are noise), or the last 5
# lines of LOG when there is none (xtrain never started, or was killed).
xt_error_line() {
  local line
  line=$(grep -E '^rank [0-9]+ \([^)]*\): ' "$1" | grep -m1 -v -E '^rank [0-9]+ \([^)]*\): warning: ' || true)
  if [[ -n $line ]]; then echo "$line"; else tail -5 "$1"; fi
}

# xt_train LOG METRICS CMD...: runs one training command with its output in LOG and the command, one
# line (xt_quote), in LOG's .cmd sibling (LOG without .log, plus .cmd); METRICS is removed first so a
# failed run leaves no stale figures. Returns the command's status; on failure its error line
# (xt_error_line) goes to stderr.
xt_train() {
  local log=$1 metrics=$2
  shift 2
  rm -f "$metrics"
  xt_quote "$@" >"${log%.log}.cmd"
  if ! "$@" >"$log" 2>&1; then
    xt_error_line "$log" >&2
    return 1
  fi
}

# xt_steady METRICS WARMUP: the steady-state figures of a metrics file as one JSON object
# (bench/steady.py says which).
xt_steady() { "$PY" "$XT_BENCH_DIR/steady.py" "$1" "$2"; }
