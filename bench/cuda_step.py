#!/usr/bin/env python3
"""One training step per sequence on one GPU: oomb (chunk-recurrent, paged) beside Hugging Face
transformers + PyTorch (bf16, SDPA attention, gradient checkpointing), in one run, on random-init
Qwen2.5-0.5B-, 1.5B- and 7B-shaped models. Columns: N, tokens/s, MFU, peak device memory.

    python3 bench/cuda_step.py --oomb gpu-bundle/oomb [--models 0.5b,1.5b,7b] [--lengths 8192,32768,131072]
                               [--chunks 4096,8192] [--budget 1200] [--out DIR]

Each configuration runs in its own process under a time limit; a run that does not finish says so
(and so does one that runs out of memory). FLOPs (both lines alike): train/flops.h's formula,
linear layers + causal attention, forward + backward, recomputation not counted; MFU against the
GPU's dense bf16 peak. The oomb line trains with AdamW; Hugging Face's too (torch.optim.AdamW,
fused) unless it cannot hold the optimizer state, which the table then says.
"""
import argparse, json, os, subprocess, sys, tempfile, time

PRESETS = {"0.5b": "qwen2.5-0.5b", "1.5b": "qwen2.5-1.5b", "7b": "qwen2.5-7b"}


def train_flops(cfg, n):
    d, L, H, G, D, I, V = (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
                           cfg["num_key_value_heads"], cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
                           cfg["intermediate_size"], cfg["vocab_size"])
    linear = L * (d * H * D + 2 * d * G * D + H * D * d + 3 * d * I) + V * d
    return 3.0 * (2.0 * n * linear + 4.0 * L * H * D * n * (n + 1) / 2.0)


def peak_flops():
    import torch
    name = torch.cuda.get_device_name(0)
    for key, v in [("H200", 989.4e12), ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989.4e12), ("A100", 312e12)]:
        if all(k in name for k in key.split()):
            return name, v
    return name, 0.0


HF_CHILD = r'''
import json, sys, time, torch, transformers
model_dir, n, with_opt = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
torch.manual_seed(0)
m = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16, attn_implementation="sdpa").cuda()
m.gradient_checkpointing_enable()
m.config.use_cache = False
opt = torch.optim.AdamW(m.parameters(), lr=1e-5, fused=True) if with_opt else None
ids = torch.randint(0, m.config.vocab_size, (1, n), device="cuda")
def step():
    out = m(input_ids=ids, labels=ids)
    out.loss.backward()
    if opt: opt.step(); opt.zero_grad(set_to_none=True)
    else: m.zero_grad(set_to_none=True)
step(); torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
t = time.perf_counter(); step(); torch.cuda.synchronize(); dt = time.perf_counter() - t
print(json.dumps({"s": dt, "peak": torch.cuda.max_memory_allocated()}))
'''


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", "timeout"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oomb", default="gpu-bundle/oomb")
    ap.add_argument("--models", default="0.5b,1.5b,7b")
    ap.add_argument("--lengths", default="8192,32768,131072")
    ap.add_argument("--chunks", default="4096,8192")
    ap.add_argument("--budget", type=float, default=1200, help="seconds for the whole run")
    ap.add_argument("--per-run", type=float, default=300)
    ap.add_argument("--out", default=tempfile.mkdtemp(prefix="oomb-bench-"))
    a = ap.parse_args()
    start = time.time()
    name, peak = peak_flops()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"device {name} (bf16 peak {peak / 1e12:.0f} TFLOP/s), {time.strftime('%Y-%m-%d')}, commit {commit}\n")
    print("| model | line | N | C | tokens/s | MFU | peak device memory | note |")
    print("|---|---|---|---|---|---|---|---|")
    for mk in a.models.split(","):
        mdir = os.path.join(a.out, mk)
        if not os.path.exists(os.path.join(mdir, "config.json")):
            subprocess.run([a.oomb, "init", "--preset", PRESETS[mk], "--dtype", "bf16", "--out", mdir], check=True,
                           capture_output=True)
        cfg = json.load(open(os.path.join(mdir, "config.json")))
        hf_stopped = False
        for n in [int(x) for x in a.lengths.split(",")]:
            left = a.budget - (time.time() - start)
            if left < 30:
                print(f"| {mk} | (budget spent) | {n} | | | | | |")
                continue
            toks = os.path.join(a.out, f"tokens_{n}.bin")
            if not os.path.exists(toks):
                import numpy as np
                np.random.default_rng(0).integers(0, 151643, n + 1, dtype=np.uint32).tofile(toks)
            for c in [int(x) for x in a.chunks.split(",")]:
                met = os.path.join(a.out, f"m_{mk}_{n}_{c}.jsonl")
                rc, out, err = run([a.oomb, "train", "--device", "cuda", "--model", mdir, "--data", toks, "--seq-len",
                                    str(n), "--chunk-size", str(min(c, n)), "--steps", "2", "--optimizer", "adamw",
                                    "--metrics", met], min(a.per_run, left))
                if rc == 0:
                    j = [json.loads(l) for l in open(met)][-1]
                    dev = j["memory"].get("device", {}).get("total", {}).get("peak", 0)
                    print(f"| {mk} | oomb | {n} | {c} | {j['tokens_per_s']:.0f} | "
                          f"{100 * train_flops(cfg, n) * j['tokens_per_s'] / n / peak:.1f}% | {dev / 2**30:.2f} GiB | |")
                else:
                    why = "timeout" if rc is None else (err.strip().splitlines() or ["failed"])[-1][:100]
                    print(f"| {mk} | oomb | {n} | {c} | | | | {why} |")
            if hf_stopped:
                print(f"| {mk} | HF+PyTorch | {n} | | | | | stopped at a shorter N |")
                continue
            for with_opt in ("1", "0"):
                rc, out, err = run([sys.executable, "-c", HF_CHILD, mdir, str(n), with_opt], min(a.per_run, left))
                if rc == 0:
                    j = json.loads(out.strip().splitlines()[-1])
                    print(f"| {mk} | HF+PyTorch | {n} | | {n / j['s']:.0f} | {100 * train_flops(cfg, n) / j['s'] / peak:.1f}% | "
                          f"{j['peak'] / 2**30:.2f} GiB | {'' if with_opt == '1' else 'forward + backward only: AdamW did not fit'} |")
                    break
                oom = "out of memory" in err.lower() or "OutOfMemory" in err
                if with_opt == "0" or not oom:
                    print(f"| {mk} | HF+PyTorch | {n} | | | | | {'out of memory' if oom else ('timeout' if rc is None else 'failed')} |")
                    hf_stopped = oom
                    break


if __name__ == "__main__":
    main()
