#!/usr/bin/env python3
"""Peak memory and time per training step against sequence length N, side by side, in one run:
  (a) plain PyTorch eager with autograd, float32 (bench/torch_eager_baseline.py),
  (b) oomb with C = N (full-sequence training through the chunked code),
  (c) oomb chunk-recurrent (C fixed).
Each point is one process: the oomb lines report the process's peak RSS (/usr/bin/time) and the
accountant's per-tag peaks (--metrics); a line stops at the first N over the memory cap or over its
time budget. Results: one JSON object per line in --out. Plot with bench/plot_memory_vs_length.py."""
import argparse, json, os, random, struct, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def emit(out, rec):
    print(json.dumps(rec), flush=True)
    with open(out, "a") as f:
        f.write(json.dumps(rec) + "\n")


def run_oomb(args, line, N, C, data, work):
    metrics = os.path.join(work, f"m_{line}_{N}.jsonl")
    cmd = ["/usr/bin/time", "-f", "%M %e", args.oomb, "train", "--model", args.model, "--data", data,
           "--seq-len", str(N), "--chunk-size", str(C), "--page-size", str(args.page), "--steps", "1",
           "--optimizer", "sgd", "--lr", "1e-4", "--metrics", metrics]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.budget_s)
    except subprocess.TimeoutExpired:
        return {"line": line, "N": N, "C": C, "status": f"over the {args.budget_s} s budget"}
    if p.returncode != 0:
        return {"line": line, "N": N, "C": C, "status": "error", "stderr": p.stderr[-400:]}
    rss_kb, wall = p.stderr.strip().splitlines()[-1].split()
    m = json.loads(open(metrics).read().splitlines()[-1])
    host = m["memory"]["host"]
    rec = {"line": line, "N": N, "C": C, "status": "ok", "peak_rss_bytes": int(rss_kb) * 1024,
           "sec_per_step": N / m["tokens_per_s"], "process_wall_s": float(wall),
           "tags": {k: v["peak"] for k, v in host.items()}}
    if rec["peak_rss_bytes"] > args.mem_cap_gib * 2**30:
        rec["status"] = "over cap"
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--oomb", default=os.path.join(ROOT, "build", "oomb"))
    ap.add_argument("--model", default=None, help="HF model dir (default: oomb init --preset tiny in a temp dir)")
    ap.add_argument("--mem-cap-gib", type=float, default=16)
    ap.add_argument("--torch-lens", default="1024,2048,4096,8192,16384")
    ap.add_argument("--full-lens", default="1024,2048,4096,8192,16384,32768")
    ap.add_argument("--chunked-lens", default="1024,4096,16384,65536,131072")
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--page", type=int, default=128)
    ap.add_argument("--budget-s", type=int, default=3600, help="per oomb run")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="PyTorch threads (oomb uses OpenMP, all cores)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "memory_vs_length.jsonl"))
    args = ap.parse_args()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    open(args.out, "w").close()
    work = tempfile.mkdtemp(prefix="oomb-bench-")
    if args.model is None:
        args.model = os.path.join(work, "model")
        subprocess.run([args.oomb, "init", "--preset", "tiny", "--out", args.model], check=True)
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    lens = lambda s: [int(x) for x in s.split(",") if x]
    nmax = max(lens(args.full_lens) + lens(args.chunked_lens))
    data = os.path.join(work, "tokens.bin")
    rnd = random.Random(0)
    with open(data, "wb") as f:
        f.write(struct.pack(f"<{nmax + 1}I", *[rnd.randrange(cfg["vocab_size"]) for _ in range(nmax + 1)]))
    emit(args.out, {"meta": {"model": cfg, "mem_cap_gib": args.mem_cap_gib, "chunk": args.chunk, "page": args.page,
                             "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count()}})
    # (a) PyTorch eager: its own script runs each N in a fresh process and stops past the cap
    t = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "torch_eager_baseline.py"), "--model", args.model,
                        "--seq-lens", args.torch_lens, "--steps", "1", "--threads", str(args.threads),
                        "--mem-cap-gib", str(args.mem_cap_gib)], capture_output=True, text=True)
    for ln in t.stdout.splitlines():
        rec = json.loads(ln)
        rec["line"] = "pytorch-eager"
        emit(args.out, rec)
    # (b), (c): oomb
    for line, ns, chunk_of in (("oomb-full", lens(args.full_lens), lambda n: n),
                               ("oomb-chunked", lens(args.chunked_lens), lambda n: min(args.chunk, n))):
        for N in ns:
            rec = run_oomb(args, line, N, chunk_of(N), data, work)
            emit(args.out, rec)
            if rec["status"] != "ok":
                break


if __name__ == "__main__":
    sys.exit(main())
