#!/usr/bin/env python3
"""The layer's activation memory under --precision bf16 against fp32, and against an oomb from before
a change (--before), in one run.

Trains one small model of Qwen2.5's proportions (I / d = 5.5) with `oomb train --device DEVICE` at
each precision and reads the device's activations and total peaks from --metrics (the accountant's),
beside `oomb plan --json`'s for the same flags, with the last step's loss. Then `oomb plan` alone for
real shapes (--presets, --plan-seq-len, --plan-chunk). Results: one JSON object per line in --out,
and Markdown tables on stdout."""
import json, os, sys

from bench_setup import before_after_args, init_model, plan, train_peaks, write_tokens


def train(args, oomb, model, data, precision, work):
    flags = ["--device", args.device, "--seq-len", str(args.seq_len), "--chunk-size", str(args.chunk),
             "--precision", precision]
    metrics = os.path.join(work, f"m_{os.getpid()}_{precision}.jsonl")
    return dict(train_peaks(oomb, model, data, flags, args.steps, metrics), precision=precision)


def main():
    args = before_after_args(__doc__, "bf16_activations.jsonl")
    builds = [("after", args.oomb)] + ([("before", args.before)] if args.before else [])
    work, model = init_model(args.oomb, args.init.split(), "oomb-bf16-activations-")
    data = write_tokens(os.path.join(work, "tokens.bin"), args.seq_len * args.steps + 1, 512)  # every step's
    mismatched = 0
    with open(args.out, "w") as out:
        print("| build | precision | device activations | device total | plan = peaks | loss |")
        print("|---|---|---|---|---|---|")
        for name, oomb in builds:
            for precision in ("fp32", "bf16"):
                r = dict(train(args, oomb, model, data, precision, work), build=name)
                out.write(json.dumps(r) + "\n")
                same = r["activations"] == r["plan_activations"] and r["total"] == r["plan_total"]
                mismatched += 0 if same else 1
                print(f"| {name} | {precision} | {r['activations']:,} | {r['total']:,} | {'yes' if same else 'NO'} | "
                      f"{r['loss']:.9f} |", flush=True)
        print(f"\n`oomb plan --device cuda --precision bf16 --seq-len {args.plan_seq_len} --chunk-size "
              f"{args.plan_chunk}`, device bytes:\n")
        print("| preset | " + " | ".join(f"activations, {n} | total, {n}" for n, _ in builds) + " |")
        print("|---|" + "---|---|" * len(builds))
        for preset in args.presets.split(","):
            cells = []
            for name, oomb in builds:
                d = plan(oomb, ["--preset", preset, "--device", "cuda", "--precision", "bf16", "--seq-len",
                                str(args.plan_seq_len), "--chunk-size", str(args.plan_chunk)])["device"]
                out.write(json.dumps({"build": name, "preset": preset, "activations": d["activations"],
                                      "total": d["total"]}) + "\n")
                cells += [f"{d['activations']:,}", f"{d['total']:,}"]
            print(f"| {preset} | " + " | ".join(cells) + " |", flush=True)
    if mismatched:
        sys.exit(f"bf16_activations: {mismatched} run(s) whose peaks differ from oomb plan's")


if __name__ == "__main__":
    main()
