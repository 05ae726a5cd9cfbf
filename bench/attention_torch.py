#!/usr/bin/env python3
"""PyTorch's own attention kernels at the attention lab's shapes, the yardstick for oomb's: C queries
(the chunk) over N keys (the chunk's own last), causal with the mask aligned bottom-right, GQA,
bf16, forward and backward, through torch.nn.functional.scaled_dot_product_attention with one
backend at a time (cuDNN, FlashAttention-2, memory-efficient). A backend that refuses a shape says
so. FLOPs as dev/attention_lab.cpp counts them: 4 * pairs * H * D forward, 2.5 times that backward,
pairs = C (N - C) + C (C + 1) / 2 (each visible query-key pair once).

    python3 bench/attention_torch.py [--heads 28 --kv-heads 4 --dim 128 --chunk 4096 --keys 32768]

Timing: CUDA events, 3 warm-ups, median of 10 (forward alone; backward as forward + backward
minus forward). Needs a GPU (the device machine has PyTorch)."""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right


def median_ms(f, reps=10, warm=3):
    for _ in range(warm):
        f()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        a.record()
        f()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--heads", type=int, default=28)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=4096)
    ap.add_argument("--keys", type=int, default=32768)
    a = ap.parse_args()
    H, G, D, C, N = a.heads, a.kv_heads, a.dim, a.chunk, a.keys
    torch.manual_seed(0)
    q = torch.randn(1, H, C, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, G, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, G, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(1, H, C, D, device="cuda", dtype=torch.bfloat16)
    pairs = C * (N - C) + C * (C + 1) / 2
    fwd_flops = 4.0 * pairs * H * D
    bwd_flops = 2.5 * fwd_flops
    print(f"device {torch.cuda.get_device_name()}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
          f"C={C} queries over N={N} keys, H={H} G={G} D={D}, bf16, causal bottom-right", flush=True)
    print("| kernel (PyTorch SDPA) | forward ms | forward TFLOP/s | backward ms | backward TFLOP/s | note |")
    print("|---|---|---|---|---|---|", flush=True)
    # the keys repeated per query head where a backend wants equal head counts
    kr = k.detach().repeat_interleave(H // G, dim=1).requires_grad_()
    vr = v.detach().repeat_interleave(H // G, dim=1).requires_grad_()
    for name, be in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("FlashAttention-2", SDPBackend.FLASH_ATTENTION),
                     ("memory-efficient", SDPBackend.EFFICIENT_ATTENTION)):
        for gqa in (True, False):
            note = "GQA (enable_gqa)" if gqa else "K/V repeated to H heads"
            kk, vv = (k, v) if gqa else (kr, vr)
            mask = causal_lower_right(C, N)
            try:
                with sdpa_kernel([be]):
                    def fwd():
                        return F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, enable_gqa=gqa)

                    def both():
                        o = fwd()
                        o.backward(do)

                    f = median_ms(fwd)
                    fb = median_ms(both)
                b = fb - f
                print(f"| {name} | {f:.3f} | {fwd_flops / f / 1e9:.1f} | {b:.3f} | {bwd_flops / b / 1e9:.1f} | {note} |",
                      flush=True)
                break  # GQA worked: the repeated form is not needed
            except Exception as e:  # noqa: BLE001 (a backend that refuses says so; the next is tried)
                msg = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
                print(f"| {name} | | | | | {note}: refused ({msg}) |", flush=True)
            finally:
                for t in (q, k, v, kr, vr):
                    t.grad = None


if __name__ == "__main__":
    main()
