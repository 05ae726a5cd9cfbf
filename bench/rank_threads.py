#!/usr/bin/python3
"""Ranks on one host sharing its cores: time per step of P ranks under `mpirun --bind-to none`, each
rank's OpenMP team over every core (OMP_NUM_THREADS = the host's CPUs, what an unset OMP_NUM_THREADS
gave every rank before dist/rank_threads) against the team oomb now chooses (OMP_NUM_THREADS unset:
the host's CPUs / P), in one run, with the host's AdamW under --offload params on the simulated
device (host_update.update_s, host_update.threads from --metrics).

    python3 bench/rank_threads.py [--build build] [--ranks 2] [--seq-len 2048] [--chunk 512] [--steps 4]
                                  [--out bench/results/rank_threads.jsonl]
"""
import argparse, json, os

import numpy as np

from bench_setup import init_model, run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    oomb = os.path.abspath(os.path.join(a.build, "oomb"))
    work, model = init_model(oomb, ["--preset", "tiny", "--hidden", "256", "--intermediate", "704", "--layers", "4",
                                    "--heads", "8", "--kv-heads", "4", "--vocab", "512"], "oomb-rank-threads.")
    data = os.path.join(work, "tokens.bin")
    np.random.default_rng(0).integers(0, 512, size=a.ranks * a.seq_len * a.steps + 1, dtype=np.uint32).tofile(data)
    ncores = len(os.sched_getaffinity(0))  # (the CPUs this process, and the unbound ranks, may run on)
    rows = []
    for line, threads in (("every rank a team over every core", str(ncores)), ("the cores shared (oomb's choice)", None)):
        metrics = os.path.join(work, f"m{len(rows)}.jsonl")
        env = os.environ.copy()
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        env.pop("OMP_NUM_THREADS", None)
        if threads:
            env["OMP_NUM_THREADS"] = threads
        out = run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(a.ranks), oomb, "train", "--model", model,
                   "--data", data, "--seq-len", str(a.seq_len), "--chunk-size", str(a.chunk), "--steps", str(a.steps),
                   "--dp", str(a.ranks), "--device", "sim", "--offload", "params", "--metrics", metrics], env)
        lines = [json.loads(l) for l in open(metrics)]
        later = lines[1:] or lines  # the first step warms up
        row = {"line": line, "ranks": a.ranks, "cpus": ncores, "seq_len": a.seq_len, "chunk": a.chunk,
               "threads_per_rank": lines[-1]["host_update"]["threads"],
               "s_per_step": float(np.median([l["tokens"] / l["tokens_per_s"] for l in later])),
               "host_update_s": float(np.median([l["host_update"]["update_s"] for l in later])),
               "banner": next((l for l in out.splitlines() if "ranks on this host" in l), "")}
        rows.append(row)
        print(json.dumps(row))
    print(f"time per step, shared / every core: {rows[1]['s_per_step'] / rows[0]['s_per_step']:.3f}")
    if a.out:
        with open(a.out, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
