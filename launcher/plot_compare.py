#!/usr/bin/env python3
"""Draws a momoe-compare run: usage plot_compare.py CURVES.csv OUT.png

One band per variant: the training loss against the step, smoothed over 10 steps; the line is the
mean over seeds and the band spans the seeds' minimum to maximum.
Input: OUT/curves.csv written by momoe-compare (variant,seed,step,loss).
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def smooth(values, window=10):
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > window:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def main(path, out):
    runs = defaultdict(lambda: defaultdict(dict))  # variant -> seed -> step -> loss
    order = []
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["variant"] not in runs:
                order.append(row["variant"])
            runs[row["variant"]][row["seed"]][int(row["step"])] = float(row["loss"])
    if not order:
        sys.exit(f"{path}: no curves to plot")
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for variant in order:
        seeds = runs[variant]
        steps = sorted(set.intersection(*(set(s) for s in seeds.values())))
        curves = np.array([smooth([seeds[s][t] for t in steps]) for s in seeds])
        line, = ax.plot(steps, curves.mean(axis=0), lw=1.4, label=f"{variant} ({len(seeds)} seeds)")
        ax.fill_between(steps, curves.min(axis=0), curves.max(axis=0), color=line.get_color(), alpha=0.2)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (10-step mean)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
