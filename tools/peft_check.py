#!/usr/bin/env python3
"""An adapter oomb trained and saved, loaded by PEFT itself (the GPU machine has PEFT): PEFT's logits
of base + adapter against transformers' logits of the model `oomb merge` wrote, in float64 (and
the adapter moving them: against the base's, far more than that error), and every tensor of the
adapter present in PEFT's loaded model with its values, bit for bit.

    python3 tools/peft_check.py --oomb gpu-bundle/oomb [--base tests/fixtures/hf/llama]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--oomb", required=True)
    ap.add_argument("--base", default="tests/fixtures/hf/llama")
    a = ap.parse_args()
    import peft
    import transformers
    w = tempfile.mkdtemp()
    toks = os.path.join(w, "t.bin")
    np.random.default_rng(0).integers(0, 61, 400, dtype=np.uint32).tofile(toks)
    adapter, merged = os.path.join(w, "adapter"), os.path.join(w, "merged")
    for cmd in ([a.oomb, "train", "--model", a.base, "--data", toks, "--data-format", "u32", "--seq-len", "32",
                 "--steps", "3", "--lr", "1e-2", "--lora-rank", "4", "--lora-alpha", "8", "--lora-targets", "all",
                 "--out", adapter],
                [a.oomb, "merge", "--model", a.base, "--lora", adapter, "--out", merged]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    kw = dict(attn_implementation="eager")
    base = transformers.AutoModelForCausalLM.from_pretrained(a.base, dtype=torch.float64, **kw)
    pm = peft.PeftModel.from_pretrained(base, adapter).to(torch.float64)
    mm = transformers.AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float64, **kw)
    ids = torch.tensor(np.random.default_rng(1).integers(0, 61, (1, 40)))
    with torch.no_grad():
        lp = pm(input_ids=ids).logits
        lm = mm(input_ids=ids).logits
        with pm.disable_adapter():
            lb = pm(input_ids=ids).logits
    err = ((lp - lm).norm() / lm.norm()).item()
    moved = ((lp - lb).norm() / lb.norm()).item()  # the adapter's effect: a zero adapter would pass the above
    # every tensor oomb saved, in PEFT's model (its names add the adapter's name, "default"), bit for bit
    from safetensors.torch import load_file
    saved = load_file(os.path.join(adapter, "adapter_model.safetensors"))
    params = dict(pm.named_parameters())
    missing, worst = [], 0.0
    for k, v in saved.items():
        pk = k.replace(".lora_A.weight", ".lora_A.default.weight").replace(".lora_B.weight", ".lora_B.default.weight")
        if pk not in params:
            missing.append(k)
            continue
        worst = max(worst, (params[pk].detach().double() - v.double()).abs().max().item())
    n = sum(1 for k in params if "lora_" in k)
    print(f"[ peft     ] PEFT {peft.__version__} loaded oomb's adapter ({n} LoRA tensors; {len(saved)} saved, "
          f"{len(missing)} of them not in PEFT's model, the rest {'equal' if worst == 0 else f'up to {worst:.2e} apart'}); "
          f"its logits against oomb merge's model: rel. error {err:.2e}; the adapter moves them by {moved:.2e}")
    if missing:
        print(f"[ peft     ] not found in PEFT's model: {missing[:3]}; PEFT's: {[k for k in params if 'lora_' in k][:3]}")
    if not err <= 1e-5 or n == 0 or missing or worst != 0 or not moved > 100 * err:
        print("[ peft     ] FAILED")
        sys.exit(1)


if __name__ == "__main__":
    main()
