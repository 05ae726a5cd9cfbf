#!/usr/bin/env python3
"""oomb's TensorBoard event files read by the tensorboard package itself (the GPU machine has it):
a short `oomb train --tensorboard DIR --metrics FILE` run, then tensorboard's EventAccumulator
loads DIR, and every step's loss, lr and grad norm equal --metrics' (float32, as TensorBoard keeps
scalars).

    python3 tools/tensorboard_check.py --oomb gpu-bundle/oomb [--model tests/fixtures/hf/llama]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--oomb", required=True)
    ap.add_argument("--model", default="tests/fixtures/hf/llama")
    a = ap.parse_args()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    w = tempfile.mkdtemp()
    toks, tb, met = os.path.join(w, "t.bin"), os.path.join(w, "tb"), os.path.join(w, "m.jsonl")
    np.random.default_rng(0).integers(0, 61, 400, dtype=np.uint32).tofile(toks)
    cmd = [a.oomb, "train", "--model", a.model, "--data", toks, "--data-format", "u32", "--seq-len", "32",
           "--steps", "5", "--lr", "1e-3", "--tensorboard", tb, "--metrics", met]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    acc = EventAccumulator(tb)
    acc.Reload()
    tags = acc.Tags()["scalars"]
    rows = [json.loads(l) for l in open(met)]
    bad = 0
    for key in ("loss", "lr", "grad_norm"):
        tag = next((t for t in tags if t.split("/")[-1] == key), None)
        if tag is None:
            print(f"[ tboard   ] no scalar for {key} among {tags}")
            bad += 1
            continue
        got = {e.step: e.value for e in acc.Scalars(tag)}
        for j in rows:
            if np.float32(j[key]) != np.float32(got.get(j["step"], np.nan)):
                bad += 1
    print(f"[ tboard   ] tensorboard read {len(tags)} scalar tags from oomb's events; loss, lr, grad norm of "
          f"{len(rows)} steps against --metrics: {'equal' if bad == 0 else f'{bad} differ'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
