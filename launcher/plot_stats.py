#!/usr/bin/env python3
"""Draws momoe training statistics: usage plot_stats.py STATS.jsonl OUT.png

Top row: training loss and perplexity against the step (evaluation perplexities as markers).
Below: one heatmap per MoE layer of each expert's share of the routed assignments over steps.
Input: the JSON lines written by `momoe-stats RUN_DIR --json`.
"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def main(path, out):
    records = [json.loads(line) for line in open(path) if line.strip()]
    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "loss" not in r]
    if not train:
        sys.exit(f"{path}: no training steps to plot")
    layers = len(train[-1].get("layers", []))
    rows = 1 + layers
    fig, axes = plt.subplots(rows, 2, figsize=(12, 3.2 * rows), squeeze=False)
    steps = [r["step"] for r in train]
    loss = [r["loss"] for r in train]
    axes[0][0].plot(steps, loss, lw=1)
    axes[0][0].set_title("training loss")
    axes[0][0].set_xlabel("step")
    axes[0][1].plot(steps, [math.exp(min(x, 50)) for x in loss], lw=1, label="train")
    for key, marker in (("valid_ppl", "o"), ("test_ppl", "s"), ("attacked_valid_ppl", "^"),
                        ("attacked_test_ppl", "v")):
        pts = [(r["step"], r[key]) for r in evals if key in r]
        if pts:
            axes[0][1].plot(*zip(*pts), marker, label=key.replace("_ppl", ""))
    axes[0][1].set_yscale("log")
    axes[0][1].set_title("perplexity")
    axes[0][1].set_xlabel("step")
    axes[0][1].legend(fontsize=8)
    for l in range(layers):
        loads = np.array([r["layers"][l]["expert_load"] for r in train], dtype=float)
        share = loads / np.maximum(loads.sum(axis=1, keepdims=True), 1)
        ax = axes[1 + l][0]
        im = ax.imshow(share.T, aspect="auto", origin="lower", interpolation="nearest",
                       extent=[steps[0], steps[-1], -0.5, share.shape[1] - 0.5], cmap="viridis")
        block = train[-1]["layers"][l]["block"]
        ax.set_title(f"block {block}: expert load share")
        ax.set_xlabel("step")
        ax.set_ylabel("expert")
        fig.colorbar(im, ax=ax)
        ax2 = axes[1 + l][1]
        for key in ("dropped_fraction", "balance_loss", "mean_entropy", "probe_flip_rate"):
            ax2.plot(steps, [r["layers"][l].get(key, 0) for r in train], lw=1, label=key)
        ax2.set_title(f"block {block}: router statistics")
        ax2.set_xlabel("step")
        ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
