#!/usr/bin/env python3
"""Linear work with page-sparse attention (CPU): the CPU time of one training step (one OpenMP
thread, so that the figure is the work even on a shared machine) at N = 16K, 32K, 64K for dense
attention and for --sparse-pages K (K fixed), one `oomb train --steps 1` process per point (SGD,
chunk C, page P, a 2-layer model of hidden 32 with 2 heads of 16). With K fixed sparse attention's
work per chunk is constant, so its time grows with N; dense attention's grows with N^2. Prints one
JSON line per point and the ratios between the first and last N. Results: --out (JSON lines)."""
import argparse, json, os, random, resource, struct, subprocess, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def step_time(args, model, data, N, extra, work, tag):
    """(CPU seconds, wall seconds) of one training step: the process with --steps 1, one OpenMP thread.
    CPU time (user + sys of the child) is the measure of work: the machine may be shared."""
    metrics = os.path.join(work, f"m_{tag}_{N}.jsonl")
    cmd = ["nice", "-n", str(args.nice), args.oomb, "train", "--model", model, "--data", data, "--seq-len", str(N),
           "--chunk-size", str(args.chunk), "--page-size", str(args.page), "--steps", "1", "--optimizer", "sgd",
           "--lr", "1e-4", "--metrics", metrics] + extra
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-1000:]}")
    lines = [json.loads(l) for l in open(metrics).read().splitlines()]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, N / lines[-1]["tokens_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--oomb", default=os.path.join(ROOT, "build", "oomb"))
    ap.add_argument("--lens", default="16384,32768,65536")
    ap.add_argument("--dense-lens", default=None, help="the lengths dense runs at (default: --lens)")
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--page", type=int, default=128)
    ap.add_argument("--sparse-pages", type=int, default=8)
    ap.add_argument("--nice", type=int, default=19)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "sparse_linear.jsonl"))
    args = ap.parse_args()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    work = tempfile.mkdtemp(prefix="oomb-sparse-")
    model = os.path.join(work, "model")
    subprocess.run([args.oomb, "init", "--preset", "tiny", "--layers", "2", "--hidden", "32", "--heads", "2",
                    "--kv-heads", "1", "--out", model], check=True, capture_output=True)
    lens = [int(x) for x in args.lens.split(",")]
    data = os.path.join(work, "tokens.bin")
    rng = random.Random(1)
    with open(data, "wb") as f:
        f.write(struct.pack(f"<{2 * max(lens) + 1}I", *[rng.randrange(128) for _ in range(2 * max(lens) + 1)]))
    lines = {"dense": [], f"sparse K={args.sparse_pages}": []}
    dense_lens = [int(x) for x in (args.dense_lens or args.lens).split(",")]
    with open(args.out, "w") as out:
        for N in lens:
            for name, extra in (("dense", []), (f"sparse K={args.sparse_pages}", ["--sparse-pages", str(args.sparse_pages)])):
                if name == "dense" and N not in dense_lens:
                    continue
                cpu, wall = step_time(args, model, data, N, extra, work, name.split()[0])
                lines[name].append((N, cpu))
                rec = {"line": name, "N": N, "C": args.chunk, "P": args.page, "cpu_s_per_step": round(cpu, 2),
                       "wall_s_per_step": round(wall, 2)}
                print(json.dumps(rec), flush=True)
                out.write(json.dumps(rec) + "\n")
        for name, ts in lines.items():
            if len(ts) < 2:  # one length: no ratio
                continue
            (n0, c0), (n1, c1) = ts[0], ts[-1]
            rec = {"line": name, "N": f"{n0} -> {n1}", "cpu_ratio": round(c1 / c0, 2), "N_ratio": n1 / n0}
            print(json.dumps(rec), flush=True)
            out.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
