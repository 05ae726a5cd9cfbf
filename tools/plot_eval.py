#!/usr/bin/python3
"""Draws `oomb eval --out FILE.json` as a PNG: the loss by position (a line over the window's
buckets), or for --passkey the accuracy per prompt length and key depth (a heat map).

  tools/plot_eval.py eval.json [-o eval.png] [--label NAME] [more.json ...]

Several loss-by-position files go on one plot (e.g. an untrained and a trained model); the
labels are their "model" fields unless --label gives them. A file of several held-out sets
(`oomb eval --data A --data B`) draws a line per set (not the sets together), labelled with the
set's file name (`i:name`, i from 0, where two sets share one, as oomb train's TensorBoard tags). Needs matplotlib (python3-matplotlib)."""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def per_set(runs, labels):
    """Each file's runs to draw: itself, or each of its held-out sets."""
    for r, label in zip(runs, labels):
        if "sets" in r:
            names = [os.path.basename(str(s.get("data", "?")).rstrip("/")) for s in r["sets"]]
            for i, (s, name) in enumerate(zip(r["sets"], names)):
                yield s, f"{label}: {name if names.count(name) == 1 else f'{i}:{name}'}"
        else:
            yield r, label


def loss_by_position(runs, labels, out):
    """Draws the lines; returns their labels."""
    fig, ax = plt.subplots(figsize=(7, 4))
    drawn = []
    for r, label in per_set(runs, labels):
        drawn.append(label)
        b = r["loss_by_position"]
        mid = [(x["begin"] + x["end"]) / 2 for x in b]
        ax.plot(mid, [x["loss"] if x["loss"] is not None else float("nan") for x in b], marker="o", label=label)
    ax.set_xlabel("position in the window (bucket centre)")
    ax.set_ylabel("mean loss (nats)")
    ax.set_title(f"loss by position, {runs[0]['seq_len']}-token windows")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return drawn


def passkey(run, label, out):
    p = run["passkey"]
    acc = p["accuracy"]
    fig, ax = plt.subplots(figsize=(1.2 * len(p["depths"]) + 2, 0.6 * len(p["lengths"]) + 2))
    im = ax.imshow(acc, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(p["depths"])), [f"{d:g}" for d in p["depths"]])
    ax.set_yticks(range(len(p["lengths"])), [str(n) for n in p["lengths"]])
    for i, row in enumerate(acc):
        for j, a in enumerate(row):
            ax.text(j, i, f"{100 * a:.0f}%", ha="center", va="center", fontsize=9)
    ax.set_xlabel("depth of the key")
    ax.set_ylabel("prompt length (tokens)")
    ax.set_title(f"passkey retrieval: {label} ({p['trials']} keys per cell)")
    fig.colorbar(im, ax=ax, label="accuracy")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+")
    ap.add_argument("-o", "--out", help="PNG to write (default: the first JSON's name with .png)")
    ap.add_argument("--label", action="append", default=[], help="a name per file, in order")
    a = ap.parse_args()
    runs = []
    for path in a.json:
        try:
            with open(path) as f:
                runs.append(json.load(f))
        except (OSError, ValueError) as e:
            sys.exit(f"plot_eval: {path}: {e}")
    labels = a.label + [r.get("model", p) for r, p in zip(runs, a.json)][len(a.label):]
    out = a.out or a.json[0].rsplit(".", 1)[0] + ".png"
    if all("passkey" in r for r in runs):
        if len(runs) != 1:
            sys.exit("plot_eval: one passkey file per plot")
        passkey(runs[0], labels[0], out)
    elif all("loss_by_position" in r for r in runs):
        out += " (lines: " + "; ".join(loss_by_position(runs, labels, out)) + ")"
    else:
        sys.exit("plot_eval: each file must be the JSON of oomb eval (loss_by_position) or oomb eval --passkey")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
