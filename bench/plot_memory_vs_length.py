#!/usr/bin/env python3
"""Plots bench/results/memory_vs_length.jsonl (from bench/memory_vs_length.py): peak resident memory
and seconds per step against N for each line, and for the chunk-recurrent line its accountant peak
without the kv and kv_grad tags (flat in N) next to kv + kv_grad."""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

src = sys.argv[1] if len(sys.argv) > 1 else "bench/results/memory_vs_length.jsonl"
dst = sys.argv[2] if len(sys.argv) > 2 else "docs/memory_vs_length.png"
recs = [json.loads(l) for l in open(src) if l.strip()]
meta = next(r["meta"] for r in recs if "meta" in r)
ok = [r for r in recs if r.get("status") == "ok"]
lines = {"pytorch-eager": "PyTorch eager (autograd, fp32)", "oomb-full": "oomb, C = N",
         "oomb-chunked": f"oomb chunked, C = {meta['chunk']}"}
fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.6))
for key, label in lines.items():
    pts = sorted((r["N"], r["peak_rss_bytes"] / 2**30, r["sec_per_step"]) for r in ok if r["line"] == key)
    if not pts:
        continue
    n, mem, sec = zip(*pts)
    a1.plot(n, mem, "o-", label=label)
    a2.plot(n, sec, "o-", label=label)
ch = sorted((r["N"], r["tags"]) for r in ok if r["line"] == "oomb-chunked")
if ch:
    n = [c[0] for c in ch]
    kv = [(t.get("kv", 0) + t.get("kv_grad", 0)) / 2**30 for _, t in ch]
    rest = [(t["total"] - t.get("kv", 0) - t.get("kv_grad", 0)) / 2**30 for _, t in ch]
    a1.plot(n, rest, "s--", label="oomb chunked: accounted, without kv + kv_grad")
    a1.plot(n, kv, "^--", label="oomb chunked: kv + kv_grad")
a1.axhline(meta["mem_cap_gib"], color="gray", ls=":", label=f"{meta['mem_cap_gib']:g} GiB cap")
for a, y in ((a1, "peak memory (GiB)"), (a2, "seconds per training step")):
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel("sequence length N (tokens)")
    a.set_ylabel(y)
    a.grid(True, which="both", alpha=0.3)
a1.legend(fontsize=7)
a2.legend(fontsize=7)
m = meta["model"]
fig.suptitle(f"{m['architectures'][0]} hidden {m['hidden_size']}, {m['num_hidden_layers']} layers, "
             f"{m['num_attention_heads']} heads; one training step per point; {meta['date']}, {meta['cpus']} CPUs")
fig.tight_layout()
fig.savefig(dst, dpi=110)
print("wrote", dst)
