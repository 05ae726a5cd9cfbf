#!/usr/bin/env python3
"""LoRA's frozen base in memory: --precision fp32 (the base's fp32 masters) against bf16 (the base
held once in bf16: bf16 matrices, fp32 embedding, norms and biases), resident and with --offload
params, in one run on one model (--embed-norms: with the embedding and norms trainable too).

Each line is one `oomb train --device DEVICE --lora-rank R --lora-targets all` process; its peaks
by (tier, tag) come from --metrics (the accountant's) and are printed beside `oomb plan --json`'s
for the same flags, with the step's loss. Results: one JSON object per line in --out, and a
Markdown table on stdout."""
import argparse, json, os, subprocess, sys

from bench_setup import init_model, write_tokens

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUNS = [("fp32", ""), ("bf16", ""), ("fp32", "params"), ("bf16", "params")]


def flags(args, precision, offload):
    f = ["--device", args.device, "--seq-len", str(args.seq_len), "--chunk-size", str(args.chunk), "--lora-rank",
         str(args.rank), "--lora-targets", "all", "--precision", precision]
    return f + (["--offload", offload] if offload else []) + (["--train-embeddings-norms"] if args.embed_norms else [])


def run(args, model, data, precision, offload, work):
    metrics = os.path.join(work, f"m_{precision}_{offload or 'none'}.jsonl")
    cmd = [args.oomb, "train", "--model", model, "--data", data, "--steps", str(args.steps), "--lr", "1e-3",
           "--metrics", metrics] + flags(args, precision, offload)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"oomb failed: {' '.join(cmd)}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    last = json.loads(open(metrics).read().splitlines()[-1])
    plan_cmd = [args.oomb, "plan", "--model", model, "--json"] + flags(args, precision, offload)
    plan = json.loads(subprocess.run(plan_cmd, capture_output=True, text=True, check=True).stdout)
    mem = last["memory"]
    got = lambda tier, tag: mem.get(tier, {}).get(tag, {}).get("peak", 0)
    row = {"precision": precision, "offload": offload or "none", "loss": last["loss"]}
    for tier in ("device", "pinned"):
        for tag in ("weights", "total"):
            row[f"{tier}_{tag}"] = got(tier, tag)
            row[f"plan_{tier}_{tag}"] = plan[tier][tag]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--oomb", default=os.path.join(ROOT, "build", "oomb"))
    ap.add_argument("--device", default="sim", choices=["sim", "cuda"])
    ap.add_argument("--init", default="--preset tiny --hidden 256 --intermediate 768 --layers 4 --heads 4 "
                    "--kv-heads 2 --vocab 32768", help="oomb init's shape flags")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--embed-norms", action="store_true", help="LongLoRA: --train-embeddings-norms in every run")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "lora_memory.jsonl"))
    args = ap.parse_args()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    work, model = init_model(args.oomb, args.init.split(), "oomb-lora-memory-")
    data = write_tokens(os.path.join(work, "tokens.bin"), args.seq_len * args.steps + 1)  # every step's
    print("| precision | offload | device weights | device total | pinned weights | pinned total | plan = peaks | loss |")
    print("|---|---|---|---|---|---|---|---|")
    mismatched = 0
    with open(args.out, "w") as out:
        for precision, offload in RUNS:
            r = run(args, model, data, precision, offload, work)
            out.write(json.dumps(r) + "\n")
            same = all(r[k] == r["plan_" + k] for k in ("device_weights", "device_total", "pinned_weights",
                                                        "pinned_total"))
            mismatched += 0 if same else 1
            print(f"| {precision} | {r['offload']} | {r['device_weights']:,} | {r['device_total']:,} | "
                  f"{r['pinned_weights']:,} | {r['pinned_total']:,} | {'yes' if same else 'NO'} | {r['loss']:.6f} |",
                  flush=True)
    if mismatched:
        sys.exit(f"lora_memory: {mismatched} run(s) whose peaks differ from oomb plan's")


if __name__ == "__main__":
    main()
