#!/usr/bin/env python3
"""Quality of page-sparse attention on the demo's long-range task (the second half of every
1024-token window repeats the first half, so each repeated token must be found 512 tokens back):
the built-in demo trained dense and with --sparse-pages K for several K (chunks of 128 tokens,
pages of 64, one choice per 128-query tile, 1 sink page), the same seeds (--seeds) and steps. Records each
run's loss curve (--metrics) and the held-out accuracy the demo prints; plots the curves to --png.
Results: --out (JSON lines)."""
import argparse, json, os, re, subprocess, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def onset(steps):
    """The first step whose training accuracy (the repeated half) reaches 50%, or None: when the
    model starts finding the repeat."""
    return next((s["step"] for s in steps if s["accuracy"] >= 0.5), None)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--oomb", default=os.path.join(ROOT, "build", "oomb"))
    ap.add_argument("--ks", default="1,2,4", help="--sparse-pages values beside dense")
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--seeds", default="0", help="--seed values (the demo's model and task); each run at each seed")
    ap.add_argument("--shared", action="store_true", help="one choice for every head (--sparse-shared)")
    ap.add_argument("--nice", type=int, default=19)
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each run (they run side by side)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "sparse_quality.jsonl"))
    ap.add_argument("--png", default=os.path.join(ROOT, "docs", "sparse_quality.png"))
    args = ap.parse_args()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    work = tempfile.mkdtemp(prefix="oomb-sparse-q-")
    kinds = [("dense", [])] + [(f"K={k}", ["--sparse-pages", k] + (["--sparse-shared"] if args.shared else []))
                               for k in args.ks.split(",")]
    seeds = args.seeds.split(",")
    runs = [(name if len(seeds) == 1 else f"{name} seed {sd}", extra + ["--seed", sd])
            for sd in seeds for name, extra in kinds]
    curves = {}
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    procs = []
    for name, extra in runs:  # side by side, one thread each
        metrics = os.path.join(work, f"{name}.jsonl")
        cmd = ["nice", "-n", str(args.nice), args.oomb, "train", "--steps", str(args.steps), "--metrics", metrics] + extra
        procs.append((name, metrics, cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                           text=True, env=env)))
    with open(args.out, "w") as out:
        for name, metrics, cmd, proc in procs:
            stdout, stderr = proc.communicate()
            p = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
            if p.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-1000:]}")
            m = re.search(r"held-out: accuracy ([0-9.]+)%", p.stdout)
            steps = [json.loads(l) for l in open(metrics).read().splitlines()]
            curves[name] = [(s["step"], s["loss"]) for s in steps]
            rec = {"run": name, "seed": int(cmd[cmd.index("--seed") + 1]), "steps": args.steps,
                   "held_out_accuracy_pct": float(m.group(1)) if m else None, "onset_step": onset(steps),
                   "final_loss": steps[-1]["loss"], "sec": round(steps[-1]["elapsed_s"], 1),
                   "tail": p.stdout.strip().splitlines()[-3:]}
            print(json.dumps(rec), flush=True)
            out.write(json.dumps(rec) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    colours, styles = {}, ["-", "--", ":", "-."]
    for name, c in curves.items():  # a colour per kind of run, a line style per seed
        kind, _, sd = name.partition(" seed ")
        first = kind not in colours
        colours.setdefault(kind, f"C{len(colours)}")
        ax.plot([s for s, _ in c], [l for _, l in c], label=kind if first else None, color=colours[kind],
                linestyle=styles[seeds.index(sd) % len(styles)] if sd else "-", linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (repeated half)")
    ax.set_yscale("log")
    ax.set_title("demo repeat task, 1024 tokens: dense vs --sparse-pages K" + (" (shared)" if args.shared else "") +
                 (f", seeds {args.seeds} (line styles)" if len(seeds) > 1 else ""), fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
