#!/usr/bin/env python3
"""--sweep chunk against --sweep layer with --offload params: time per step and the bytes moved
between host and device, measured (the stores' and the KV cache's counts in --metrics "moved")
beside the planner's
(`oomb plan --json`, "sweep"), for one model shape and several N.

Each point is one `oomb train --device DEVICE --offload params --sweep ORDER` process of --steps
steps: the fastest step after the first (wall time: the machine may be shared), and the process's
CPU time (user + system, every thread, start-up included) divided by the steps. On --device sim (the default) the CPU kernels run and the copy engine
is a thread doing memcpy (OOMB_SIM_COPY_DELAY_US adds a delay before every copy), so the times
compare the engine's work in the two orders on this CPU, not a GPU's. The losses of the two orders
are printed too: they must be equal (the orders give the same bits). Results: one JSON object per
line in --out, and a Markdown table on stdout."""
import argparse, json, os, resource, subprocess, sys

from bench_setup import init_model, write_tokens

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(args, model, data, N, sweep, work):
    metrics = os.path.join(work, f"m_{N}_{sweep}.jsonl")
    shape = ["--seq-len", str(N), "--chunk-size", str(args.chunk), "--page-size", str(args.page),
             "--offload", args.offload, "--sweep", sweep]
    cmd = [args.oomb, "train", "--model", model, "--data", data, "--device", args.device, *shape,
           "--steps", str(args.steps), "--optimizer", "adamw", "--lr", "1e-4", "--metrics", metrics]
    # passive OpenMP waits: spinning threads would count as CPU time and starve each other
    env = dict(os.environ, OOMB_SIM_COPY_DELAY_US=str(args.delay_us), OMP_WAIT_POLICY="PASSIVE")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"oomb failed: {' '.join(cmd)}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    lines = [json.loads(l) for l in open(metrics).read().splitlines()]
    plan = json.loads(subprocess.run([args.oomb, "plan", "--model", model, "--device", args.device, *shape, "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    last = lines[-1]
    planned = plan["sweep"][sweep]
    moved = last["moved"]
    return {"N": N, "sweep": sweep, "C": args.chunk, "sec_per_step": min(N / l["tokens_per_s"] for l in lines[1:]),
            "cpu_s_per_step": ((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)) / args.steps,
            "moved": moved, "moved_total": sum(moved.values()),
            "planned": {k: planned[k] for k in ("weights", "grads", "activations", "kv", "kv_grads")},
            "planned_total": planned["total"],
            "losses": [l["loss"] for l in lines],
            "device_peak": last["memory"]["device"]["total"]["peak"],
            "pinned_peak": last["memory"]["pinned"]["total"]["peak"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--oomb", default=os.path.join(ROOT, "build", "oomb"))
    ap.add_argument("--device", default="sim", choices=["sim", "cuda"])
    ap.add_argument("--shape", default="--hidden 256 --intermediate 768 --layers 8 --heads 4 --kv-heads 2 --vocab 2048",
                    help="oomb init flags of the model")
    ap.add_argument("--lens", default="1024,2048,4096")
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--page", type=int, default=128)
    ap.add_argument("--offload", default="params")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--delay-us", type=int, default=0, help="OOMB_SIM_COPY_DELAY_US")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "sweep.jsonl"))
    args = ap.parse_args()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    work, model = init_model(args.oomb, args.shape.split(), "oomb-sweep-")
    lens = [int(x) for x in args.lens.split(",")]
    data = write_tokens(os.path.join(work, "tokens.bin"), max(lens) * args.steps + 1)  # every step of the longest N
    rows = []
    with open(args.out, "w") as out:
        for N in lens:
            for sweep in ("chunk", "layer"):
                r = run(args, model, data, N, sweep, work)
                rows.append(r)
                out.write(json.dumps(r) + "\n")
                print(json.dumps(r), file=sys.stderr, flush=True)
            a, b = rows[-2], rows[-1]
            if a["losses"] != b["losses"]:
                sys.exit(f"N = {N}: the orders' losses differ: {a['losses']} vs {b['losses']}")
    mib = lambda b: f"{b / 2**20:.1f} MiB"
    print(f"oomb init {args.shape}; --device {args.device} --offload {args.offload}, C = {args.chunk}, "
          f"copy delay {args.delay_us} us, {args.steps} steps (the fastest after the first), AdamW on the host\n")
    print("| N | sweep | s/step (wall) | CPU s/step | moved per step (measured = planned) | weights | grads | activations | kv pages | kv_grad pages | device peak | pinned peak |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        same = "=" if r["moved_total"] == r["planned_total"] else f"!= {mib(r['planned_total'])}"
        m = r["moved"]
        print(f"| {r['N']} | {r['sweep']} | {r['sec_per_step']:.2f} | {r['cpu_s_per_step']:.2f} | {mib(r['moved_total'])} ({same}) | "
              f"{mib(m['weights'])} | {mib(m['grads'])} | {mib(m['activations'])} | {mib(m['kv'])} | "
              f"{mib(m['kv_grads'])} | {mib(r['device_peak'])} | "
              f"{mib(r['pinned_peak'])} |")


if __name__ == "__main__":
    main()
