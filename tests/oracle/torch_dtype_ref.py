#!/usr/bin/python3
"""PyTorch's bf16 / f16 conversions, as an external reference for tests/test_dtype.cpp.

    /usr/bin/python3 tests/oracle/torch_dtype_ref.py IN.f32 OUT.bin

IN.f32   raw little-endian float32 values.
OUT.bin  raw little-endian, in this order:
           65536 float32: torch's bfloat16 -> float32 of every bf16 bit pattern 0..65535;
           65536 float32: torch's float16  -> float32 of every f16 bit pattern;
           n uint16: torch's float32 -> bfloat16 of the n inputs (round to nearest even);
           n uint16: torch's float32 -> float16 of the n inputs.
The conversions are torch's own (Tensor.to); numpy only moves bytes.
"""
import sys

import numpy as np
import torch


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    xs = torch.from_numpy(np.fromfile(argv[1], dtype="<f4").astype(np.float32))
    pats = torch.arange(65536, dtype=torch.int32).to(torch.int16)  # wraps: the bit patterns 0..65535
    parts = [
        pats.view(torch.bfloat16).to(torch.float32).numpy().astype("<f4"),
        pats.view(torch.float16).to(torch.float32).numpy().astype("<f4"),
        xs.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2"),
        xs.to(torch.float16).view(torch.int16).numpy().astype("<i2"),
    ]
    with open(argv[2], "wb") as f:
        for p in parts:
            f.write(p.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
