#!/usr/bin/python3
"""Plain PyTorch eager float32 training-step baseline: how far a naive N x N model gets.

This is the model a user would write in plain PyTorch: the HF Llama / Qwen2 / Mistral forward
pass of tests/oracle/torch_oracle.py (imported, not copied), with its RoPE tables cast to
float32 so everything runs in float32 autograd. Attention is the textbook version: a full
[heads, N, N] score matrix from a matmul, a causal mask, then softmax. There is no
checkpointing and no flash attention. One training step is the forward pass, the mean
cross-entropy over N targets, backward, and a plain SGD update (torch.optim.SGD, no momentum).

Each N runs in a fresh child process (this script with --child N), so the child's
peak RSS (ru_maxrss) belongs to that N alone. The child works in four stages:
  1. Estimate the peak memory. The count is the torch baseline RSS, the weights and grads
     (8 B/param), (L+2) float32 [heads,N,N] tensors (one softmax output saved per layer, plus
     two transients in backward), (L+2) bool N x N masks, the linear-in-N activations
     and three N x vocab logits buffers. If the estimate exceeds --mem-cap-gib, it reports
     "skipped" without running.
  2. Load the weights in float32 and draw seeded random token ids below vocab_size.
  3. Run one warm-up step, then --steps timed steps (the median is reported). A RuntimeError
     or MemoryError is reported as "oom". A peak RSS above the cap is reported as "over cap".
  4. Print one JSON line.
The parent prints each line, appends it to --out, and stops after the first N that is not
"ok". Its final line, which also goes to --out, is {"largest_N_within_cap": N or null,
"mem_cap_gib": cap}. The exit status is 1 if a child failed on bad input, 0 otherwise.

  /usr/bin/python3 bench/torch_eager_baseline.py --model DIR --seq-lens 1024,2048,4096 \
      [--steps 2] [--threads T] [--mem-cap-gib 16] [--seed 0] [--out FILE.jsonl]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

GIB = 1 << 30
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "oracle"))


def peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def estimate_bytes(c, n_params, N, base_rss):
    L, H, I, V = c.n_layers, c.hidden, c.inter, c.vocab
    qd, kvd = c.n_heads * c.head_dim, c.n_kv * c.head_dim
    attn = (L + 2) * (c.n_heads * N * N * 4 + N * N)   # fp32 probs/scores + bool masks
    per_tok_layer = (6 * H + 5 * qd + 4 * kvd + 4 * I) * 4  # saved linear-in-N activations
    linear = (L + 1) * N * per_tok_layer + 3 * N * V * 4    # + logits, log-probs, grad
    return base_rss + 8 * n_params + attn + linear


def child(a):
    import numpy as np
    import torch
    import torch_oracle as orc

    N, cap = a.child, int(a.mem_cap_gib * GIB)
    rec = {"N": N}
    if a.threads:
        torch.set_num_threads(a.threads)
    c = orc.load_config(a.model)
    specs = orc.param_specs(c)
    n_params = sum(int(np.prod(s)) for _, s in specs)
    est = estimate_bytes(c, n_params, N, peak_rss())
    rec.update(n_params=n_params, threads=torch.get_num_threads(), est_bytes=est)
    if est > cap:
        rec["status"] = f"skipped: estimated {est / GIB:.2f} GiB > cap {a.mem_cap_gib:g} GiB"
        return rec

    # Float32 wrapper around the oracle's float64 RoPE tables (everything else follows dtype).
    rope64 = orc.rope_cos_sin
    orc.rope_cos_sin = lambda cfg, pos: tuple(t.float() for t in rope64(cfg, pos))
    store = orc.WeightStore(a.model)
    P = {}
    for name, shape in specs:   # one tensor at a time: no full float64 copy of the model
        if name not in store.where or store.shape(name) != tuple(shape):
            raise orc.OracleError(f"{a.model}: tensor '{name}' missing or not shaped {shape}")
        P[name] = torch.from_numpy(store.load(name).astype(np.float32)).requires_grad_(True)
    opt = torch.optim.SGD(list(P.values()), lr=1e-4)
    toks = np.random.default_rng(a.seed + N).integers(0, c.vocab, N + 1, dtype=np.int64)
    inputs, targets = toks[:-1], toks[1:]
    pos, seg = np.arange(N, dtype=np.int64), np.zeros(N, dtype=np.int64)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = orc.forward_loss(c, P, inputs, targets, pos, seg)
        assert loss.dtype == torch.float32
        loss.backward()
        opt.step()
        return loss.item()

    try:
        times = []
        loss = step()   # warm-up
        for _ in range(a.steps):
            t0 = time.perf_counter()
            loss = step()
            times.append(time.perf_counter() - t0)
    except (RuntimeError, MemoryError) as e:
        rec.update(status="oom", error=str(e).splitlines()[0][:200], peak_rss_bytes=peak_rss())
        return rec
    rss = peak_rss()
    rec.update(status="ok" if rss <= cap else "over cap", sec_per_step=statistics.median(times),
               step_secs=times, peak_rss_bytes=rss, peak_rss_gib=round(rss / GIB, 3),
               loss=loss)
    return rec


def parent(a):
    seq_lens = [int(s) for s in a.seq_lens.split(",") if s.strip()]
    best = None
    for N in seq_lens:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", str(N), "--model", a.model,
               "--seq-lens", str(N), "--steps", str(a.steps), "--threads", str(a.threads),
               "--mem-cap-gib", str(a.mem_cap_gib), "--seed", str(a.seed)]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if p.returncode == 0 and lines:
            rec = json.loads(lines[-1])
        elif p.returncode < 0:   # killed by a signal (e.g. the kernel OOM killer: SIGKILL)
            rec = {"N": N, "status": "oom", "error": f"child killed by signal {-p.returncode}"}
        else:
            tail = (p.stderr.strip().splitlines() or ["?"])[-1]
            rec = {"N": N, "status": f"error (exit {p.returncode}): {tail[:300]}"}
        emit(rec, a.out)
        if rec["status"] != "ok":
            break
        best = N
    emit({"largest_N_within_cap": best, "mem_cap_gib": a.mem_cap_gib}, a.out)
    return 1 if rec["status"].startswith("error") else 0


def emit(rec, out):
    line = json.dumps(rec)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="HF dir: config.json + model.safetensors")
    ap.add_argument("--seq-lens", default="1024,2048,4096,8192,16384,32768")
    ap.add_argument("--steps", type=int, default=2, help="timed steps per N (after 1 warm-up)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    ap.add_argument("--mem-cap-gib", type=float, default=16.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="JSONL file to append results to")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.steps < 1:
        ap.error("--steps must be >= 1")
    if a.child is None:
        return parent(a)
    try:
        rec = child(a)
    except Exception as e:  # config / checkpoint problems (OracleError) and anything else
        print(f"torch_eager_baseline: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
