#!/usr/bin/env python3
"""Per-kernel time of one training step from an Nsight Compute CSV (bench/profile_gpu.sh).

Input: `ncu --csv --metrics gpu__time_duration.sum --log-file F` of a run of several steps. A step
ends with its optimizer kernels (names matching --step-end, consecutive launches taken as one run);
the last complete step is summarized: kernels grouped by name (template arguments and parameters cut),
calls, total microseconds, share of the step's kernel time, then by op family (FAMILIES below, first
match wins). Prints a Markdown table. Errors (no step found, unreadable CSV) exit 2 with one line.
"""
import argparse
import collections
import csv
import re
import sys

# (family, regex on the kernel name): the op a kernel belongs to, for the second table
FAMILIES = [
    ("attention (cuDNN / flash)", r"sdpa|cudnn::|flash|attention"),
    ("matmul (cuBLAS / cuBLASLt, incl. split-K and bias-gradient epilogues)",
     r"nvjet|xmma|gemm|splitKreduce|Bgrad|cutlass"),
    ("cross-entropy", r"cross_entropy"),
    ("layernorm, and column sums (layernorm dw/db; dbias where no cuBLASLt epilogue gives it)",
     r"layernorm|column_"),
    ("optimizer and weight conversion (AdamW, bf16 copies)", r"adamw|to_bf16|convert"),
    ("gradient all-reduce (NCCL)", r"nccl|Reduce<|oneRank"),
    ("embeddings (encoder)", r"encoder|RadixSort|iota"),
    ("elementwise (residual add, GELU, dropout, sums)", r"map_kernel|gelu|dropout|sum_|residual"),
]


def kernel_name(raw):
    name = re.sub(r"^void ", "", raw).replace("<unnamed>::", "").replace("(anonymous namespace)::", "")
    depth, out = 0, []
    for ch in name:  # cut template arguments and the parameter list
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)[:80] or raw[:80]


def fail(msg):
    print(f"ncu_summary.py: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --csv --log-file output")
    ap.add_argument("--step-end", default="adamw", help="regex of the kernels that end a step (default: adamw)")
    a = ap.parse_args()
    try:
        step_end = re.compile(a.step_end)
    except re.error as e:
        fail(f"--step-end '{a.step_end}' is not a regular expression ({e})")
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
             "second": 1e6}
    try:
        with open(a.csv, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(line for line in f if line.startswith('"')))
        kernels = [(r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * scale[r["Metric Unit"]])
                   for r in rows if r.get("Metric Name") == "gpu__time_duration.sum"]
    except OSError as e:
        fail(f"cannot read {a.csv}: {e.strerror}")
    except UnicodeDecodeError:
        fail(f"{a.csv}: not a text (UTF-8) file")
    except (KeyError, ValueError) as e:
        fail(f"{a.csv}: not an ncu --csv file of gpu__time_duration.sum (bad or missing column or value: {e})")
    ends = [i for i, (n, _) in enumerate(kernels) if step_end.search(n)
            and not (i + 1 < len(kernels) and step_end.search(kernels[i + 1][0]))]
    if len(ends) < 2:
        fail(f"{a.csv}: fewer than two steps ending in a kernel matching '{a.step_end}'")
    step = kernels[ends[-2] + 1:ends[-1] + 1]
    total = sum(t for _, t in step)
    by_name = collections.defaultdict(lambda: [0, 0.0])
    by_family = collections.defaultdict(float)
    for raw, t in step:
        n = kernel_name(raw)
        by_name[n][0] += 1
        by_name[n][1] += t
        fam = next((f for f, rx in FAMILIES if re.search(rx, raw)), "other")
        by_family[fam] += t
    if total <= 0:
        fail(f"{a.csv}: the last step's kernels sum to {total} us")
    print(f"{len(ends)} steps in the profile; the last: {len(step)} kernels, {total / 1e3:.2f} ms of kernel time\n")
    print("| kernel | calls | us | share |\n|---|---|---|---|")
    for n, (c, t) in sorted(by_name.items(), key=lambda x: -x[1][1]):
        print(f"| `{n}` | {c} | {t:.0f} | {100 * t / total:.1f}% |")
    print("\n| op family | ms | share |\n|---|---|---|")
    for f, t in sorted(by_family.items(), key=lambda x: -x[1]):
        print(f"| {f} | {t / 1e3:.2f} | {100 * t / total:.1f}% |")


if __name__ == "__main__":
    main()
