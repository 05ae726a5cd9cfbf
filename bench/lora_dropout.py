#!/usr/bin/env python3
"""What --lora-dropout costs: LoRA on every linear with and without dropout, in one run on one model,
at each precision: the device's peaks (the accountant's, from --metrics) beside `oomb plan --json`'s,
the median step's tokens/s after the first, and the last step's loss.

Dropout needs no memory of its own (the dropped input and x's gradient through the mask use the
adapter's output scratch), so the peaks should match the run without it; its time is one dropout
op per adapted input in each pass and one more in the backward, and the backward's x gradient split
into two GEMMs. On --device sim the compute is a CPU's, so the time column speaks for a CPU only.
Results: one JSON object per line in --out, and a Markdown table on stdout."""
import argparse, json, os, sys

from bench_setup import ROOT, HERE, init_model, train_peaks, write_tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--oomb", default=os.path.join(ROOT, "build", "oomb"))
    ap.add_argument("--device", default="sim", choices=["cpu", "sim", "cuda"])
    ap.add_argument("--init", default="--preset tiny --hidden 512 --intermediate 2816 --layers 4 --heads 8 "
                    "--kv-heads 2 --vocab 8192", help="oomb init's shape flags")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--dropout", type=float, default=0.05)
    ap.add_argument("--steps", type=int, default=5, help="tokens/s: the median of the steps after the first")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "lora_dropout.jsonl"))
    args = ap.parse_args()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    work, model = init_model(args.oomb, args.init.split(), "oomb-lora-dropout-")
    data = write_tokens(os.path.join(work, "tokens.bin"), args.seq_len * args.steps + 1, 512)  # every step's
    mismatched, differing = 0, []
    with open(args.out, "w") as out:
        print("| precision | --lora-dropout | device activations | device total | plan = peaks | loss | tokens/s |")
        print("|---|---|---|---|---|---|---|")
        for precision in ("fp32", "bf16"):
            rows = []
            for p in (0.0, args.dropout):
                flags = ["--device", args.device, "--seq-len", str(args.seq_len), "--chunk-size", str(args.chunk),
                         "--precision", precision, "--lora-rank", str(args.rank), "--lora-targets", "all",
                         "--lora-dropout", str(p)]
                metrics = os.path.join(work, f"m_{precision}_{p}.jsonl")
                r = dict(train_peaks(args.oomb, model, data, flags, args.steps, metrics), precision=precision,
                         dropout=p)
                rates = sorted(json.loads(l)["tokens_per_s"] for l in open(metrics).read().splitlines()[1:])
                r["tokens_per_s"] = rates[len(rates) // 2]  # the median step after the first
                out.write(json.dumps(r) + "\n")
                same = r["activations"] == r["plan_activations"] and r["total"] == r["plan_total"]
                mismatched += 0 if same else 1
                rows.append(r)
                print(f"| {precision} | {p:g} | {r['activations']:,} | {r['total']:,} | {'yes' if same else 'NO'} | "
                      f"{r['loss']:.6f} | {r['tokens_per_s']:,.0f} |", flush=True)
            if rows[0]["total"] != rows[1]["total"] or rows[0]["activations"] != rows[1]["activations"]:
                differing.append(precision)
    if mismatched:
        sys.exit(f"lora_dropout: {mismatched} run(s) whose peaks differ from oomb plan's")
    if differing:
        sys.exit(f"lora_dropout: dropout changed the device's peaks at {differing}")


if __name__ == "__main__":
    main()
