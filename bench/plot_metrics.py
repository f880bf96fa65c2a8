#!/usr/bin/env python3
"""Plot xtrain metrics (JSON lines) as an SVG line chart, standard library only.

Usage: plot_metrics.py OUT.svg LABEL=run.jsonl [LABEL=run.jsonl ...] [--title T]
Draws train loss (solid) and val loss (dashed, dots) per run against the step.
"""
import json
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def load(path):
    train, val = [], []
    for line in open(path):
        r = json.loads(line)
        if r.get("type") == "train":
            train.append((r["step"], r["loss"]))
        elif r.get("type") == "val":
            val.append((r["step"], r["val_loss"]))
    return train, val


def main(argv):
    title = "xtrain loss"
    if "--title" in argv:
        i = argv.index("--title")
        title = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    out, runs = argv[0], [a.split("=", 1) for a in argv[1:]]
    data = [(label, *load(path)) for label, path in runs]
    pts = [p for _, t, v in data for p in t + v]
    x0, x1 = 0, max(s for s, _ in pts)
    y0, y1 = min(l for _, l in pts), max(l for _, l in pts)
    y0, y1 = y0 - 0.05 * (y1 - y0), y1 + 0.05 * (y1 - y0)
    W, H, L, R, T, B = 720, 420, 60, 20, 40, 50
    sx = lambda s: L + (s - x0) / (x1 - x0) * (W - L - R)
    sy = lambda l: T + (y1 - l) / (y1 - y0) * (H - T - B)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    for k in range(6):
        yv = y0 + k * (y1 - y0) / 5
        o.append(f'<line x1="{L}" x2="{W-R}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{L-5}" y="{sy(yv)+4:.1f}" text-anchor="end">{yv:.2f}</text>')
    for k in range(6):
        xv = x0 + k * (x1 - x0) / 5
        o.append(f'<text x="{sx(xv):.1f}" y="{H-B+18}" text-anchor="middle">{xv:.0f}</text>')
    o.append(f'<text x="{W/2}" y="{H-10}" text-anchor="middle">optimizer step</text>')
    o.append(f'<text x="15" y="{H/2}" transform="rotate(-90 15 {H/2})" text-anchor="middle">loss (nats/token)</text>')
    for i, (label, train, val) in enumerate(data):
        c = COLORS[i % len(COLORS)]
        o.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.2" points="'
                 + " ".join(f"{sx(s):.1f},{sy(l):.1f}" for s, l in train) + '"/>')
        if val:
            o.append(f'<polyline fill="none" stroke="{c}" stroke-dasharray="5,3" stroke-width="1.5" points="'
                     + " ".join(f"{sx(s):.1f},{sy(l):.1f}" for s, l in val) + '"/>')
            o += [f'<circle cx="{sx(s):.1f}" cy="{sy(l):.1f}" r="2.5" fill="{c}"/>' for s, l in val]
        ly = T + 10 + 18 * i
        o.append(f'<line x1="{W-R-210}" x2="{W-R-185}" y1="{ly}" y2="{ly}" stroke="{c}"/>')
        o.append(f'<text x="{W-R-180}" y="{ly+4}">{label}: train (solid), val (dashed)</text>')
    o.append("</svg>")
    open(out, "w").write("\n".join(o) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
