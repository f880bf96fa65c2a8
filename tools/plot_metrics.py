#!/usr/bin/python3
"""Plot xtrain metrics files (--metrics, JSON lines) as PNG and/or SVG with matplotlib.

Three panels against the optimizer step: train loss (solid), validation loss (dashed, dots) and each
--eval set's loss (dotted, one marker shape per set), tokens per second, learning rate; with --eval-mc
sets a fourth, their acc_norm (solid) and acc (dashed); one colour per file. Records read: "train"
(step, loss, lr, tok_per_s), "val" (step, val_loss) and "eval" (step, name, loss or acc and acc_norm);
others ("final") are skipped. A step recorded twice (files appended by hand, resumed runs) keeps its
later record.

Examples:
  tools/plot_metrics.py run.jsonl -o run.png
  tools/plot_metrics.py w1=ts_w1.jsonl w2=ts_w2.jsonl -o loss.png -o loss.svg --title tinyshakespeare
"""
import argparse
import json
import os
import re
import sys

PNG_DPI = 120
FIG_SIZE = (8.0, 7.5)  # inches: 960 x 900 pixels at PNG_DPI


def project_version():
    """xtrain's version, as the programs' --version prints it: project(xtrain VERSION x.y.z) of the
    top-level CMakeLists.txt beside tools/ ("unknown" where the script runs without its source tree)."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "CMakeLists.txt")) as f:
            m = re.search(r"project\(xtrain VERSION ([0-9.]+)", f.read())
        return m.group(1) if m else "unknown"
    except OSError:
        return "unknown"


class MetricsError(Exception):
    """A metrics file that cannot be read or holds no record to plot."""


def load(path):
    """Reads one metrics file. Returns (train, val, evals): train maps step -> (loss, lr, tok_per_s),
    val maps step -> val_loss, evals maps an eval set's name -> step -> its loss (a float; --eval) or
    (acc, acc_norm) (--eval-mc); a later record of a step replaces an earlier one."""
    train, val, evals = {}, {}, {}
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line.strip())
                    kind = r.get("type")
                    if kind == "train":
                        train[int(r["step"])] = (float(r["loss"]), float(r["lr"]), float(r["tok_per_s"]))
                    elif kind == "val":
                        val[int(r["step"])] = float(r["val_loss"])
                    elif kind == "eval":
                        fig = (float(r["acc"]), float(r["acc_norm"])) if "acc" in r else float(r["loss"])
                        evals.setdefault(str(r["name"]), {})[int(r["step"])] = fig
                except (ValueError, KeyError, TypeError, AttributeError) as e:
                    raise MetricsError(f"{path}:{n}: not a metrics record ({type(e).__name__}: {e})") from None
    except OSError as e:
        raise MetricsError(f"{path}: {e.strerror}") from None
    if not train and not val and not evals:
        raise MetricsError(f"{path}: no train, val or eval records")
    return train, val, evals


def parse_run(arg):
    """'LABEL=PATH' or 'PATH' (label: the file name without .jsonl). An existing file wins over
    the LABEL=PATH reading, so paths containing '=' still work."""
    if "=" in arg and not os.path.exists(arg):
        label, path = arg.split("=", 1)
        return label, path
    base = os.path.basename(arg)
    return (base[:-6] if base.endswith(".jsonl") else base), arg


def plot(runs, outs, title):
    """runs: [(label, train, val, evals)] as load() returns them; outs: paths ending in .png or .svg."""
    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "xtrain"  # the same input gives the same SVG
    has_mc = any(isinstance(f, tuple) for run in runs for e in run[3].values() for f in e.values())
    if has_mc:
        fig, (ax_loss, ax_acc, ax_tok, ax_lr) = plt.subplots(
            4, 1, figsize=FIG_SIZE, sharex=True, gridspec_kw={"height_ratios": [2.2, 1.4, 1, 1]})
    else:
        fig, (ax_loss, ax_tok, ax_lr) = plt.subplots(
            3, 1, figsize=FIG_SIZE, sharex=True, gridspec_kw={"height_ratios": [2.2, 1, 1]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    shapes = "s^vDP*X"  # one marker shape per eval set
    for i, (label, train, val, evals) in enumerate(runs):
        c = colors[i % len(colors)]
        steps = sorted(train)
        marker = "o" if len(steps) == 1 else None  # one point draws no line
        if steps:
            ax_loss.plot(steps, [train[s][0] for s in steps], color=c, lw=1.2, marker=marker,
                         label=f"{label} train")
            ax_lr.plot(steps, [train[s][1] for s in steps], color=c, lw=1.2, marker=marker, label=label)
            ax_tok.plot(steps, [train[s][2] for s in steps], color=c, lw=1.0, marker=marker, label=label)
        if val:
            vs = sorted(val)
            ax_loss.plot(vs, [val[s] for s in vs], color=c, lw=1.5, ls="--", marker="o", ms=3.5,
                         label=f"{label} val")
        for k, (name, e) in enumerate(sorted(evals.items())):
            es = sorted(e)
            m = shapes[k % len(shapes)]
            if isinstance(e[es[0]], tuple):
                ax_acc.plot(es, [e[s][1] for s in es], color=c, lw=1.4, marker=m, ms=3.5, label=f"{label} {name} acc_norm")
                ax_acc.plot(es, [e[s][0] for s in es], color=c, lw=1.0, ls="--", marker=m, ms=2.5, label=f"{label} {name} acc")
            else:
                ax_loss.plot(es, [e[s] for s in es], color=c, lw=1.2, ls=":", marker=m, ms=3.5, label=f"{label} {name}")
    ax_loss.set_ylabel("loss (nats/token)")
    ax_loss.set_title(title)
    ax_loss.legend(fontsize="small")
    ax_tok.set_ylabel("tok/s")
    ax_tok.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
    ax_lr.set_ylabel("learning rate")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    ax_lr.set_xlabel("optimizer step")
    if has_mc:
        ax_acc.set_ylabel("multiple-choice\naccuracy")
        ax_acc.legend(fontsize="x-small")
    for ax in (ax_loss, ax_tok, ax_lr) + ((ax_acc,) if has_mc else ()):
        ax.grid(True, color="#dddddd", lw=0.6)
    fig.align_ylabels()
    fig.tight_layout()
    for out in outs:
        if out.endswith(".svg"):
            fig.savefig(out, metadata={"Date": None})
        else:
            fig.savefig(out, dpi=PNG_DPI)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(
        prog="plot_metrics.py", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="[LABEL=]FILE", help="metrics file(s) written by --metrics")
    ap.add_argument("-o", "--out", action="append", metavar="OUT",
                    help="output file, .png or .svg; repeat for both (default: metrics.png)")
    ap.add_argument("--title", default="xtrain", help="title above the loss panel")
    ap.add_argument("--version", action="version", version=f"plot_metrics.py {project_version()}")
    a = ap.parse_args(argv)
    outs = a.out or ["metrics.png"]
    for out in outs:
        if not out.endswith((".png", ".svg")):
            ap.error(f"output {out}: the name must end in .png or .svg")
    try:
        runs = [(label, *load(path)) for label, path in map(parse_run, a.runs)]
    except MetricsError as e:
        print(f"plot_metrics.py: error: {e}", file=sys.stderr)
        return 1
    try:
        plot(runs, outs, a.title)
    except ImportError as e:
        print(f"plot_metrics.py: error: {e} in {sys.executable} (install the Debian package python3-matplotlib: "
              "scripts/setup.sh --tests, or apt-get install python3-matplotlib; and run the script as "
              "tools/plot_metrics.py, whose interpreter is /usr/bin/python3)",
              file=sys.stderr)
        return 1
    except OSError as e:
        print(f"plot_metrics.py: error: cannot write {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    for out in outs:
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
