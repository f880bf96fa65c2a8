# Shared helpers for the shell tests (sourced). Needs XTRAIN_BIN_DIR (set by tests/CMakeLists.txt).
# Test data: a 400 KB excerpt of data/brown.txt (scripts/setup.sh) with the GPT-2 files in data/gpt2,
# or, when data/ is absent, ../shared/data; exit 77 (ctest: skipped) when neither is there.
set -euo pipefail

XT="${XTRAIN_BIN_DIR:?XTRAIN_BIN_DIR not set}/xtrain_mpi"
XT_THREADS="$XTRAIN_BIN_DIR/xtrain_threads"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/xtrain-test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
# The per-user token cache (--cache-dir's default) goes into the test's own directory, never the
# machine's ~/.cache (CI runs as root on a clean clone).
export XDG_CACHE_HOME="$WORK/xdg-cache"

xt_data() {
  local dd="${XTRAIN_DATA_DIR:-}" sd="${XTRAIN_SHARED_DATA:-}"
  if [[ -f "$dd/brown.txt" && -f "$dd/gpt2/encoder.json" && -f "$dd/gpt2/vocab.bpe" ]]; then
    head -c 400000 "$dd/brown.txt" > "$WORK/corpus.txt"
    TOK=(--encoder-json "$dd/gpt2/encoder.json" --vocab-bpe "$dd/gpt2/vocab.bpe")
  elif [[ -f "$sd/tinyshakespeare.txt" && -f "$sd/gpt2/encoder.json" ]]; then
    head -c 400000 "$sd/tinyshakespeare.txt" > "$WORK/corpus.txt"
    TOK=(--encoder-json "$sd/gpt2/encoder.json" --vocab-bpe "$sd/gpt2/vocab.bpe")
  else
    echo "SKIP: no data (run scripts/setup.sh, or provide ../shared/data)"
    exit 77
  fi
  DATA=(--data "$WORK/corpus.txt" "${TOK[@]}")
}

# A small model that exercises every op, grouped-query attention included; fast on 2 cores.
TINY=(--dim 32 --heads 4 --kv-heads 2 --layers 2 --seq 32 --batch 8 --lr 3e-3 --warmup 5 --val-every 0 --log-every 5)

# The model families the multi-rank tests run on TINY (docs/design.md, "Model"): XT_FAMILIES, and
# xt_family NAME, which sets FAM to the options of family NAME (llama: with its own head).
XT_FAMILIES=(gpt2 llama)
xt_family() {
  case "$1" in
    gpt2) FAM=() ;;
    llama) FAM=(--arch llama --tie-embeddings false) ;;
    *) echo "xt_family: family must be one of ${XT_FAMILIES[*]} (got '$1')" >&2; exit 2 ;;
  esac
}

# mpirun for tests: root needs an opt-in, more ranks than cores need oversubscription.
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

# xt_run LAUNCHER NP [args]: NP ranks as mpirun processes (LAUNCHER mpi) or as threads of one
# xtrain_threads process (LAUNCHER threads).
xt_run() {
  local launcher=$1 np=$2
  shift 2
  case "$launcher" in
    mpi) "${MPIRUN[@]}" -np "$np" "$XT" "$@" ;;
    threads) "$XT_THREADS" --ranks "$np" "$@" ;;
    *) echo "xt_run: launcher must be mpi or threads (got '$launcher')" >&2; return 2 ;;
  esac
}

# xt_losses FILE: "step loss" of every train record of a metrics file, as written (text, so equal
# means bitwise).
xt_losses() {
  python3 -c 'import json,sys
recs=[json.loads(l) for l in open(sys.argv[1])]
print("\n".join("%d %r" % (r["step"], r["loss"]) for r in recs if r["type"] == "train"))' "$1"
}
