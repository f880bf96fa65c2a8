#!/usr/bin/env bash
# Gate 3: data-parallel scaling of the design configuration, threads against processes.
# For each launcher (xtrain_threads: one thread per GPU; mpirun: one process per GPU) and each world
# size (1, 2, 4, 8: as many as GPUs are visible) trains the design model (C=384, L=12, NH=12, HS=32,
# FFN=1536, T=256, bf16, 32 sequences per GPU) and measures the steady-state tok/s (median over the
# steps after the warm-up), the speed-up and efficiency against world 1 of the same launcher, and the
# mean GPU utilisation of the ranks' GPUs sampled by nvidia-smi during the steady state.
# Writes OUTDIR/scaling.json and every run's log and metrics; prints a markdown table.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/scaling.sh [--help] OUTDIR
Run from the repository root on the GPU host (data/ set up by scripts/setup.sh).
Environment:
  BIN    directory with xtrain_threads and xtrain_mpi (default: build-gpu; DEVICE=cpu: build)
  DEVICE     cuda (default) or cpu: a dry run of the script itself with a tiny model, worlds 1 2
  WORLDS     world sizes to measure (default: 1 2 4 8, those not above the visible GPUs)
  LAUNCHERS  default: "threads mpi"
  DATA       corpus and GPT-2 BPE files (default: data)
  STEPS      optimizer steps per run (default 40; cpu: 8); WARMUP: steps left out of tok/s and
             utilisation (default 5; cpu: 2)
Output: OUTDIR/scaling.json, OUTDIR/<launcher>_w<N>.{log,jsonl,util.csv}; a markdown table on stdout.
Exit: non-zero with a one-line reason when a run fails or an input is missing.
EOF
}
die() { echo "scaling.sh: error: $*" >&2; exit 1; }

[[ "${1:-}" == "--help" || "${1:-}" == "-h" ]] && { usage; exit 0; }
[[ $# -eq 1 ]] || { usage >&2; exit 2; }
OUT=$1
DEVICE=${DEVICE:-cuda}
BIN=${BIN:-$([[ $DEVICE == cpu ]] && echo build || echo build-gpu)}
LAUNCHERS=${LAUNCHERS:-threads mpi}
[[ $DEVICE == cuda || $DEVICE == cpu ]] || die "DEVICE must be cuda or cpu (got '$DEVICE')"
source "$(dirname "$0")/common.sh"
for f in "$DATA/brown.txt" "$DATA/gpt2/encoder.json" "$DATA/gpt2/vocab.bpe"; do
  [[ -f $f ]] || die "$f missing: run from the repository root after scripts/setup.sh"
done
for b in xtrain_threads xtrain_mpi; do [[ -x "$BIN/$b" ]] || die "$BIN/$b not found (set BIN)"; done
command -v python3 >/dev/null || die "python3 not found"

case "$DEVICE" in
  cuda)
    command -v nvidia-smi >/dev/null || die "nvidia-smi not found (DEVICE=cpu for a dry run)"
    NGPU=$(nvidia-smi -L | grep -c '^GPU' || true)
    ((NGPU >= 1)) || die "no GPU visible"
    read -r -a MODEL <<<"$(xt_workload_model design)"
    MODEL+=(--dtype bf16 --device cuda)
    PER_RANK=32 STEPS=${STEPS:-40} WARMUP=${WARMUP:-5}
    WORLDS=${WORLDS:-1 2 4 8}
    ;;
  cpu)
    NGPU=2  # the dry run pretends two devices: worlds 1 and 2
    MODEL=(--dim 32 --heads 4 --kv-heads 2 --layers 2 --seq 32 --device cpu)
    PER_RANK=4 STEPS=${STEPS:-8} WARMUP=${WARMUP:-2}
    WORLDS=${WORLDS:-1 2}
    ;;
  *) die "DEVICE must be cuda or cpu (got '$DEVICE')" ;;
esac
((STEPS > WARMUP + 1)) || die "STEPS ($STEPS) must exceed WARMUP + 1 ($((WARMUP + 1)))"
COMMON=("${XT_DATA_ARGS[@]}" "${MODEL[@]}" --steps "$STEPS" --val-every 0 --log-every 10 --warmup 2)
MPI=(mpirun --allow-run-as-root --bind-to none)
mkdir -p "$OUT"

sampler=""
stop_sampler() { [[ -n "$sampler" ]] && { kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; }; sampler=""; }
job=""
cleanup() { stop_sampler; [[ -n "$job" ]] && kill "$job" 2>/dev/null || true; }
trap cleanup EXIT

# measure LAUNCHER WORLD: one run; utilisation sampled (every 200 ms) from the end of step WARMUP on.
measure() {
  local launcher=$1 world=$2 base="$OUT/$1_w$2"
  local cmd=()
  if [[ $launcher == threads ]]; then cmd=("$BIN/xtrain_threads" --ranks "$world")
  else cmd=("${MPI[@]}" -np "$world" "$BIN/xtrain_mpi"); fi
  rm -f "$base.jsonl" "$base.util.csv"
  : > "$base.util.csv"
  echo "== $launcher world $world: ${cmd[*]} ... --batch $((PER_RANK * world))" >&2
  "${cmd[@]}" "${COMMON[@]}" --batch $((PER_RANK * world)) --metrics "$base.jsonl" > "$base.log" 2>&1 &
  job=$!
  if [[ $DEVICE == cuda ]]; then
    while kill -0 "$job" 2>/dev/null && ! grep -q "\"step\":$((WARMUP + 1))[,}]" "$base.jsonl" 2>/dev/null; do sleep 0.2; done
    nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader,nounits -lms 200 > "$base.util.csv" 2>/dev/null &
    sampler=$!
  fi
  local rc=0
  wait "$job" || rc=$?
  job=""
  stop_sampler
  ((rc == 0)) || { tail -n 15 "$base.log" >&2; die "$launcher world $world exited $rc (log: $base.log)"; }
}

RUNS=()
for launcher in $LAUNCHERS; do
  [[ $launcher == threads || $launcher == mpi ]] || die "LAUNCHERS: threads or mpi (got '$launcher')"
  for w in $WORLDS; do
    [[ $w =~ ^[1-9][0-9]*$ ]] || die "WORLDS: positive integers (got '$w')"
    ((w <= NGPU)) || { echo "world $w skipped: $NGPU GPU(s) visible" >&2; continue; }
    measure "$launcher" "$w"
    RUNS+=("$launcher:$w")
  done
done

"$PY" - "$OUT" "$DEVICE" "$WARMUP" "$PER_RANK" "${RUNS[@]}" <<'PY'
import json, os, statistics, sys
sys.path.insert(0, os.environ["XT_BENCH_DIR"])
from steady import steady
out, device, warmup, per_rank, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
rows = []
for run in runs:
    launcher, world = run.split(":")
    world = int(world)
    base = f"{out}/{launcher}_w{world}"
    s = steady(f"{base}.jsonl", warmup)
    util = []
    for line in open(f"{base}.util.csv"):
        idx, u = (x.strip() for x in line.split(",")[:2])
        if idx.isdigit() and int(idx) < world and u.replace(".", "").isdigit():
            util.append(float(u))
    rows.append({"launcher": launcher, "world": world, "batch": per_rank * world,
                 "tok_per_s": s["median_tok_per_s"], "steady_steps": s["timed_steps"],
                 "gpu_util_pct": statistics.mean(util) if util else None, "util_samples": len(util)})
for r in rows:
    base = next(x for x in rows if x["launcher"] == r["launcher"] and x["world"] == 1) if any(
        x["launcher"] == r["launcher"] and x["world"] == 1 for x in rows) else None
    r["speedup"] = r["tok_per_s"] / base["tok_per_s"] if base else None
    r["efficiency"] = r["speedup"] / r["world"] if base else None
json.dump({"device": device, "sequences_per_rank": per_rank, "warmup_steps_excluded": warmup, "runs": rows},
          open(f"{out}/scaling.json", "w"), indent=1)
f = lambda x, fmt, unit="": "n/a" if x is None else format(x, fmt) + unit
print("| launcher | world | batch | tok/s (median, steady) | speed-up | efficiency | GPU util |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r['launcher']} | {r['world']} | {r['batch']} | {r['tok_per_s']:,.0f} | {f(r['speedup'], '.2f', 'x')} | "
          f"{f(r['efficiency'], '.1%')} | {f(r['gpu_util_pct'], '.0f', '%')} |")
print(f"(JSON: {out}/scaling.json)")
PY
