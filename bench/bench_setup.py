"""What the memory and offload benchmarks share: a fresh model directory from `oomb init`, and a
fixed pseudo-random token stream (u32 ids below `vocab`, the same bytes in every run)."""
import os, struct, subprocess, tempfile


def init_model(oomb, init_flags, prefix):
    """A temporary directory and, in it, `oomb init <init_flags>`'s model: (work, model)."""
    work = tempfile.mkdtemp(prefix=prefix)
    model = os.path.join(work, "model")
    subprocess.run([oomb, "init", *init_flags, "--out", model], check=True, capture_output=True)
    return work, model


def write_tokens(path, count, vocab=128):
    """`count` token ids below `vocab` (128 fits every preset's vocabulary) from a 64-bit LCG."""
    with open(path, "wb") as f:
        x = 12345
        for _ in range(count):
            x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
            f.write(struct.pack("<I", (x >> 33) % vocab))
    return path
