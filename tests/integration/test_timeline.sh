#!/usr/bin/env bash
# --timeline: rank 0's Chrome trace of steps 2-4 at world 2 parses, names forward and each
# block's backward on the compute track, and shows the overlap: with --bucket-mb 0.05 (4 buckets) the
# first gradient all-reduce starts before the backward pass ends; with --bucket-mb 0 the one
# all-reduce starts after it. Under mpirun (MPI_Iallreduce) and xtrain_threads (blocking buckets).
source "$(dirname "$0")/common.sh"
xt_data
ARGS=("${DATA[@]}" "${TINY[@]}" --layers 4 --batch 8 --steps 4)  # steps 2-4 are traced
for launcher in mpi threads; do
  for mb in 0.05 0; do
    name="$launcher-b$mb"
    xt_run_ok "$name" "$launcher" 2 "${ARGS[@]}" --bucket-mb "$mb" --timeline "$WORK/$name.json"
    python3 - "$WORK/$name.json" "$mb" "$name" <<'PY' || fail "$name: the trace"
import json, sys
path, mb, name = sys.argv[1], float(sys.argv[2]), sys.argv[3]
trace = json.load(open(path))  # must parse
events = trace["traceEvents"]
tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
assert sorted(tracks.values()) == ["communication", "compute"], tracks
spans = [e for e in events if e["ph"] == "X"]
steps = sorted({e["args"]["step"] for e in spans})
assert steps == [2, 3, 4], f"recorded steps {steps}, want 2-4"
def fail(msg):
    sys.exit(f"FAIL: {name}: {msg}")
for s in steps:
    comp = [e for e in spans if e["args"]["step"] == s and tracks[e["tid"]] == "compute"]
    comm = [e for e in spans if e["args"]["step"] == s and tracks[e["tid"]] == "communication"]
    names = [e["name"] for e in comp]
    want = ["forward", "backward lnf", "backward h3", "backward h2", "backward h1", "backward h0",
            "backward embeddings", "wait for the gradient all-reduce", "loss all-reduce, gradient norm, AdamW"]
    if names != want:
        fail(f"step {s}: compute spans {names}")
    if any(e["dur"] < 0 for e in comp + comm):
        fail("a span of negative duration")
    backward_end = next(e for e in comp if e["name"] == "backward embeddings")
    backward_end = backward_end["ts"] + backward_end["dur"]
    first_start = min(e["ts"] for e in comm) if comm else None
    if mb > 0:
        if len(comm) != 4 or not all(e["name"].startswith("all-reduce of gradient bucket") for e in comm):
            fail(f"step {s}: want 4 bucket all-reduces, got {[e['name'] for e in comm]}")
        if not first_start < backward_end:
            fail(f"step {s}: first bucket starts at {first_start:.0f} us, backward ends at {backward_end:.0f} us")
    else:
        if [e["name"] for e in comm] != ["all-reduce of the gradients"]:
            fail(f"step {s}: want one all-reduce, got {[e['name'] for e in comm]}")
        if not first_start >= backward_end:
            fail(f"step {s}: the all-reduce starts at {first_start:.0f} us, before backward ends at {backward_end:.0f} us")
print(f"{name}: steps {steps}, first all-reduce starts {first_start - backward_end:+.0f} us from the backward's end (step 4)")
PY
  done
done
# World 1 runs no gradient collective: the trace has no all-reduce span and no wait for one, and
# bench/timeline_summary.py reports each step with all_reduces 0; the run summary names the trace.
xt_run_ok w1 mpi 1 "${ARGS[@]}" --timeline "$WORK/w1.json"
grep -qF "trace  | $WORK/w1.json | steps 2-4 (rank 0's --timeline" "$WORK/w1.log" ||
  { cat "$WORK/w1.log"; fail "w1: the run summary does not name the trace it wrote"; }
python3 "$(dirname "$0")/../../bench/timeline_summary.py" "$WORK/w1.json" >"$WORK/w1.summary" ||
  fatal "timeline_summary.py on the world-1 trace"
python3 - "$WORK/w1.json" "$WORK/w1.summary" <<'PY' || fail "w1: the trace and its summary"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["name"] for e in events if e["ph"] == "X"}
bad = [n for n in names if "all-reduce" in n and n != "loss all-reduce, gradient norm, AdamW"]
if bad:
    sys.exit(f"FAIL: w1: gradient all-reduce spans at world 1: {sorted(bad)}")
recs = [json.loads(line) for line in open(sys.argv[2])]
if [r["step"] for r in recs] != [2, 3, 4] or any(r["all_reduces"] != 0 for r in recs):
    sys.exit(f"FAIL: w1: summary {recs}")
print(f"w1: steps 2-4, no gradient collective, backward {recs[-1]['backward_ms']} ms (step 4)")
PY
xt_finish
