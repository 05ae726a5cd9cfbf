#!/usr/bin/env python3
"""What --keep-attention costs in device memory, against the run without it, with its store offloaded
(--offload attention: in pinned memory, two chunks' rows on the device), and against an oomb from
before a change (--before), in one run.

Trains one small model of Qwen2.5's proportions with `oomb train --device DEVICE` with and without
--keep-attention at each precision, and reads the device's activations and total peaks from --metrics
(the accountant's) beside `oomb plan --json`'s for the same flags, with the last step's loss and the
command's wall seconds (on sim a CPU's, so only the memory columns speak for a GPU). Then `oomb plan
--keep-attention` alone for real shapes. Results: one JSON object per line in --out, and Markdown
tables on stdout."""
import json, os, sys

from bench_setup import before_after_args, init_model, plan, train_peaks, write_tokens


def main():
    args = before_after_args(__doc__, "keep_attention.jsonl")
    builds = [("after", args.oomb)] + ([("before", args.before)] if args.before else [])
    work, model = init_model(args.oomb, args.init.split(), "oomb-keep-attention-")
    data = write_tokens(os.path.join(work, "tokens.bin"), args.seq_len * args.steps + 1, 512)  # every step's
    mismatched, losses = 0, {}
    with open(args.out, "w") as out:
        print("| build | precision | --keep-attention | device activations | device total | pinned activations | "
              "plan = peaks | loss | seconds |")
        print("|---|---|---|---|---|---|---|---|---|")
        # the store on the device, or in pinned memory (--offload attention; not in --before builds)
        keeps = {"no": [], "yes": ["--keep-attention"], "offloaded": ["--keep-attention", "--offload", "attention"]}
        for name, oomb in builds:
            for precision in ("fp32", "bf16"):
                for keep, keep_flags in keeps.items():
                    if keep == "offloaded" and (name == "before" or args.device == "cpu"):
                        continue
                    flags = ["--device", args.device, "--seq-len", str(args.seq_len), "--chunk-size",
                             str(args.chunk), "--precision", precision] + keep_flags
                    metrics = os.path.join(work, f"m_{name}_{precision}_{keep}.jsonl")
                    r = dict(train_peaks(oomb, model, data, flags, args.steps, metrics), build=name,
                             precision=precision, keep=keep)
                    out.write(json.dumps(r) + "\n")
                    same = (r["activations"] == r["plan_activations"] and r["total"] == r["plan_total"] and
                            r["pinned_activations"] == r["plan_pinned_activations"])
                    mismatched += 0 if same else 1
                    losses.setdefault(precision, set()).add(r["loss"])
                    print(f"| {name} | {precision} | {keep} | {r['activations']:,} | {r['total']:,} | "
                          f"{r['pinned_activations']:,} | {'yes' if same else 'NO'} | {r['loss']:.9f} | "
                          f"{r['seconds']:.1f} |", flush=True)
        print(f"\n`oomb plan --device cuda --seq-len {args.plan_seq_len} --chunk-size {args.plan_chunk} "
              f"--keep-attention`, device activations (and the device total, this build, with `--offload "
              f"kv` and with `--offload kv,attention`):\n")
        print("| preset | precision | " + " | ".join(f"{n}" for n, _ in builds) +
              " | --offload attention | device total, kv | device total, kv,attention | pinned, kv,attention |")
        print("|---|---|" + "---|" * len(builds) + "---|---|---|---|")
        for preset in args.presets.split(","):
            for precision in ("bf16", "fp32"):
                cells = []
                base = ["--preset", preset, "--device", "cuda", "--precision", precision, "--seq-len",
                        str(args.plan_seq_len), "--chunk-size", str(args.plan_chunk), "--keep-attention"]
                for name, oomb in builds:
                    d = plan(oomb, base)["device"]
                    out.write(json.dumps({"build": name, "preset": preset, "precision": precision,
                                          "activations": d["activations"], "total": d["total"]}) + "\n")
                    cells.append(f"{d['activations']:,}")
                off = plan(args.oomb, base + ["--offload", "attention"])["device"]
                kv = plan(args.oomb, base + ["--offload", "kv"])["device"]
                both = plan(args.oomb, base + ["--offload", "kv,attention"])
                out.write(json.dumps({"build": "after", "preset": preset, "precision": precision,
                                      "offload_attention_activations": off["activations"],
                                      "kv_total": kv["total"], "kv_attention_total": both["device"]["total"],
                                      "kv_attention_pinned": both["pinned"]["total"]}) + "\n")
                gib = lambda b: f"{b / 2**30:.2f} GiB"
                print(f"| {preset} | {precision} | " + " | ".join(cells) +
                      f" | {off['activations']:,} | {gib(kv['total'])} | {gib(both['device']['total'])} | "
                      f"{gib(both['pinned']['total'])} |", flush=True)
    if mismatched:
        sys.exit(f"keep_attention: {mismatched} run(s) whose peaks differ from oomb plan's")
    differing = [p for p, s in losses.items() if len(s) != 1]
    if differing:
        sys.exit(f"keep_attention: losses differ with and without --keep-attention (or between builds) at {differing}")


if __name__ == "__main__":
    main()
