#!/usr/bin/python3
"""Draws an `oomb train --metrics run.jsonl` file as two PNGs: loss (and lr) by step, and memory
per tier (the accountant's current and peak bytes, and the process's resident set) by step.

  tools/plot_run.py run.jsonl [-o PREFIX]   ->  PREFIX-loss.png, PREFIX-memory.png

Needs matplotlib (python3-matplotlib)."""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics")
    ap.add_argument("-o", "--out", help="prefix of the PNGs (default: the metrics file's name without .jsonl)")
    a = ap.parse_args()
    rows = []
    with open(a.metrics) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                sys.exit(f"plot_run: {a.metrics} line {n}: {e}")
    if not rows:
        sys.exit(f"plot_run: {a.metrics}: no steps")
    prefix = a.out or a.metrics.rsplit(".", 1)[0]
    steps = [r["step"] + 1 for r in rows]

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, [r["loss"] for r in rows], label="loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats)")
    ax.grid(alpha=0.3)
    lr = ax.twinx()
    lr.plot(steps, [r["lr"] for r in rows], color="tab:orange", alpha=0.6, label="lr")
    lr.set_ylabel("learning rate")
    ax.set_title(a.metrics)
    fig.tight_layout()
    fig.savefig(prefix + "-loss.png", dpi=120)

    fig, ax = plt.subplots(figsize=(7, 4))
    for tier in rows[0]["memory"]:
        peak = [r["memory"][tier]["total"]["peak"] / 2**20 for r in rows]
        if max(peak) == 0:
            continue
        ax.plot(steps, [r["memory"][tier]["total"]["current"] / 2**20 for r in rows], label=f"{tier} current")
        ax.plot(steps, peak, linestyle="--", label=f"{tier} peak")
    if "rss" in rows[0]:
        ax.plot(steps, [r["rss"]["current"] / 2**20 for r in rows], color="gray", label="resident (RSS)")
    ax.set_xlabel("step")
    ax.set_ylabel("MiB")
    ax.set_title("memory per tier")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(prefix + "-memory.png", dpi=120)
    print(f"wrote {prefix}-loss.png, {prefix}-memory.png")


if __name__ == "__main__":
    main()
