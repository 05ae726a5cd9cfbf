#!/usr/bin/env python3
"""--offload kv against all pages on the device, in one run: device, pinned-host and host peaks
(the accountant's, per tier) and time per step against N.

Each point is one `oomb train --device DEVICE` process of --steps steps (the last step is timed);
the two lines differ only in --offload kv --offload-group G. On --device sim (the default) the
CPU kernels run and the copy engine is a thread doing memcpy, so the times compare the engine's
work with and without offload, not a GPU's; on --device cuda (scripts/gpu_session.sh) they give
offload's slowdown. Results: one JSON object per line in --out, and a Markdown table on stdout."""
import argparse, json, os, subprocess, sys

from bench_setup import init_model, write_tokens

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(args, model, data, N, offload, work):
    metrics = os.path.join(work, f"m_{N}_{int(offload)}.jsonl")
    cmd = [args.oomb, "train", "--model", model, "--data", data, "--device", args.device, "--seq-len", str(N),
           "--chunk-size", str(args.chunk), "--page-size", str(args.page), "--steps", str(args.steps),
           "--optimizer", "sgd", "--lr", "1e-4", "--metrics", metrics]
    if offload:
        cmd += ["--offload", "kv", "--offload-group", str(args.group)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"oomb failed: {' '.join(cmd)}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    last = json.loads(open(metrics).read().splitlines()[-1])
    mem = last["memory"]
    peak = lambda tier: mem.get(tier, {}).get("total", {}).get("peak", 0)
    tag = lambda tier, t: mem.get(tier, {}).get(t, {}).get("peak", 0)
    return {"N": N, "offload": offload, "group": args.group if offload else None, "C": args.chunk,
            "sec_per_step": N / last["tokens_per_s"], "device_peak": peak("device"), "pinned_peak": peak("pinned"),
            "host_peak": peak("host"), "device_kv": tag("device", "kv"), "device_kv_grad": tag("device", "kv_grad"),
            "pinned_kv": tag("pinned", "kv"), "pinned_kv_grad": tag("pinned", "kv_grad")}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--oomb", default=os.path.join(ROOT, "build", "oomb"))
    ap.add_argument("--device", default="sim", choices=["sim", "cuda"])
    ap.add_argument("--preset", default="tiny", help="model shape (oomb init --preset)")
    ap.add_argument("--lens", default="2048,4096,8192,16384,32768")
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--page", type=int, default=128)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "offload.jsonl"))
    args = ap.parse_args()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    work, model = init_model(args.oomb, ["--preset", args.preset], "oomb-offload-")
    lens = [int(x) for x in args.lens.split(",")]
    data = write_tokens(os.path.join(work, "tokens.bin"), max(lens) * args.steps + 1)  # every step of the longest N
    rows = []
    with open(args.out, "w") as out:
        for N in lens:
            for offload in (False, True):
                r = run(args, model, data, N, offload, work)
                rows.append(r)
                out.write(json.dumps(r) + "\n")
                print(json.dumps(r), file=sys.stderr, flush=True)
    mib = lambda b: f"{b / 2**20:.2f} MiB"
    print(f"{args.preset} on {args.device}, C = {args.chunk}, pages of {args.page} tokens, {args.steps} steps (the last timed)\n")
    print("| N | pages | s/step | device peak | device kv + kv_grad | pinned peak | host peak |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        line = f"offload kv, group {r['group']}" if r["offload"] else "on the device"
        print(f"| {r['N']} | {line} | {r['sec_per_step']:.2f} | {mib(r['device_peak'])} | "
              f"{mib(r['device_kv'] + r['device_kv_grad'])} | {mib(r['pinned_peak'])} | {mib(r['host_peak'])} |")


if __name__ == "__main__":
    main()
