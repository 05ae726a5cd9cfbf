#!/usr/bin/env python3
"""An adapter oomb trained and saved, loaded by PEFT itself (the GPU machine has PEFT): PEFT's logits
of base + adapter against transformers' logits of the model `oomb merge` wrote, in float64, and
every tensor of the adapter present in PEFT's loaded model with its values.

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
    err = ((lp - lm).norm() / lm.norm()).item()
    n = sum(1 for k, _ in pm.named_parameters() if "lora_" in k)
    print(f"[ peft     ] PEFT {peft.__version__} loaded oomb's adapter ({n} LoRA tensors); its logits against "
          f"oomb merge's model: rel. error {err:.2e}")
    if not err <= 1e-5 or n == 0:
        print("[ peft     ] FAILED")
        sys.exit(1)


if __name__ == "__main__":
    main()
