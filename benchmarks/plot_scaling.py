#!/usr/bin/env python3
"""Plots momoe-bench scaling JSON lines: usage plot_scaling.py scaling.jsonl out.png

One panel per (layer|train, weak|strong): aggregate tokens/s against ranks, with the ideal line
(the 1-rank rate times the ranks for weak scaling, and for strong scaling too: the same work split).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(path, out):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), squeeze=False)
    for i, what in enumerate(("layer", "train")):
        for j, mode in enumerate(("weak", "strong")):
            pts = sorted((r["world_size"], r["tokens_per_second"]) for r in rows
                         if r.get("what") == what and r.get("mode") == mode
                         and r.get("hosts", 1) == 1)
            ax = axes[i][j]
            if pts:
                n, tps = zip(*pts)
                ax.plot(n, tps, "o-", label="measured")
                ax.plot(n, [tps[0] * k / n[0] for k in n], "--", label="ideal")
            ax.set_title(f"{what}, {mode} scaling")
            ax.set_xlabel("ranks (EP)")
            ax.set_ylabel("tokens/s (all ranks)")
            ax.set_xscale("log", base=2)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
