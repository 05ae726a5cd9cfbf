#!/usr/bin/env python3
"""Many ranks on the CPU: time per step and bytes per rank for --sp P = 1, 2, 4 at a fixed N.

A 4-layer model with 8 heads and 4 kv heads (hidden 256) trains on random tokens; P = 1 runs alone
with every core, P > 1 under `mpirun --oversubscribe -np P` with one OpenMP thread per rank (on a
2-core machine P = 4 oversubscribes the cores 2x: the figure shows the communication's cost, not a
speed-up). Per-rank bytes come from rank 0's --metrics line (the accountant), with the plan beside.
--head-chunks 1,2,4 runs each P > 1 with each --sp-head-chunks K that divides its kv heads / P
(e.g. --ranks 2 --kv-heads 8 for K = 4); the others are skipped.

    python3 bench/dist_scaling.py [--build build] [--seq-len 16384] [--chunk 2048] [--steps 3]
                                  [--ranks 1,2,4] [--head-chunks 1] [--kv-heads 4]
"""
import argparse, json, os, tempfile

import numpy as np

from bench_setup import run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--seq-len", type=int, default=16384)
    ap.add_argument("--chunk", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--head-chunks", default="1")
    ap.add_argument("--kv-heads", default="4")
    a = ap.parse_args()
    oomb = os.path.abspath(os.path.join(a.build, "oomb"))
    work = tempfile.mkdtemp(prefix="oomb-dist-bench.")
    model, data = os.path.join(work, "model"), os.path.join(work, "tokens.bin")
    run([oomb, "init", "--out", model, "--preset", "tiny", "--hidden", "256", "--intermediate", "704", "--layers", "4",
         "--heads", "8", "--kv-heads", a.kv_heads, "--vocab", "512"], os.environ.copy())
    np.random.default_rng(0).integers(0, 512, size=4 * a.seq_len * a.steps + 1, dtype=np.uint32).tofile(data)
    ncores = os.cpu_count()
    rows = []
    runs = [(P, K) for P in [int(x) for x in a.ranks.split(",")]
            for K in ([1] if P == 1 else [int(x) for x in a.head_chunks.split(",")])
            if (int(a.kv_heads) // P) % K == 0]
    for P, K in runs:
        metrics = os.path.join(work, f"m{P}_{K}.jsonl")
        env = os.environ.copy()
        env.update(OMP_NUM_THREADS=str(ncores if P == 1 else 1), OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        args = [oomb, "train", "--model", model, "--data", data, "--seq-len", str(a.seq_len), "--chunk-size",
                str(a.chunk), "--steps", str(a.steps), "--metrics", metrics, "--sp", str(P), "--sp-head-chunks", str(K)]
        cmd = args if P == 1 else ["mpirun", "--oversubscribe", "-np", str(P)] + args
        run(cmd, env)
        plan = json.loads(run([oomb, "plan", "--model", model, "--seq-len", str(a.seq_len), "--chunk-size", str(a.chunk),
                               "--sp", str(P), "--sp-head-chunks", str(K), "--json"], env))
        lines = [json.loads(l) for l in open(metrics)]
        step_s = np.median([l["tokens"] / l["tokens_per_s"] for l in lines[1:]])  # the first step warms up
        host = lines[-1]["memory"]["host"]
        rows.append((P, K, step_s, host["kv"]["peak"], host["kv_grad"]["peak"], host["activations"]["peak"],
                     host["total"]["peak"], plan["host"]["total"]))
        print(f"P={P} K={K}: {step_s:.2f} s/step, kv {host['kv']['peak']} B, kv_grad {host['kv_grad']['peak']} B, "
              f"activations {host['activations']['peak']} B, total {host['total']['peak']} B (plan "
              f"{plan['host']['total']} B)", flush=True)
    print("\n| ranks (--sp) | --sp-head-chunks | s / step | kv B / rank | kv_grad B / rank | activations B / rank "
          "| total B / rank | plan total |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| {} | {} | {:.2f} | {:,} | {:,} | {:,} | {:,} | {:,} |".format(*r))


if __name__ == "__main__":
    main()
