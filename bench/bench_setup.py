"""What the memory and offload benchmarks share: a fresh model directory from `oomb init`, a
fixed pseudo-random token stream (u32 ids below `vocab`, the same bytes in every run), and a
training run's last step (loss, device peaks, seconds) beside `oomb plan --json`'s device bytes."""
import argparse, json, os, struct, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cmd, env=None):
    """A command's stdout; its failure ends the benchmark, with its output."""
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


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


def before_after_args(doc, out_name):
    """The command line of a memory benchmark that trains one small model (of Qwen2.5's proportions
    by default) with this build and optionally an older one (--before), then plans real shapes
    (--presets at --plan-seq-len, --plan-chunk); results into bench/results/<out_name>. Parsed, with
    --out's folder made."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--oomb", default=os.path.join(ROOT, "build", "oomb"))
    ap.add_argument("--before", help="an oomb built before the change, for the before rows")
    ap.add_argument("--device", default="sim", choices=["sim", "cuda"])
    ap.add_argument("--init", default="--preset tiny --hidden 512 --intermediate 2816 --layers 4 --heads 8 "
                    "--kv-heads 2 --vocab 8192", help="oomb init's shape flags")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--presets", default="qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-7b")
    ap.add_argument("--plan-seq-len", type=int, default=131072)
    ap.add_argument("--plan-chunk", type=int, default=4096)
    ap.add_argument("--out", default=os.path.join(HERE, "results", out_name))
    args = ap.parse_args()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    return args


def plan(oomb, flags):
    """`oomb plan --json <flags>`, parsed."""
    p = subprocess.run([oomb, "plan", "--json"] + flags, capture_output=True, text=True, check=True)
    return json.loads(p.stdout)


def train_peaks(oomb, model, data, flags, steps, metrics):
    """`oomb train` of `steps` steps with `flags` (--metrics into the file `metrics`): the last step's
    loss, the device's activations and total peaks and the pinned activations' (the accountant's), the
    wall seconds of the whole command, and `oomb plan`'s figures for the same flags."""
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [oomb, "train", "--model", model, "--data", data, "--steps", str(steps), "--lr", "1e-3",
           "--metrics", metrics] + flags
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"oomb failed: {' '.join(cmd)}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    last = json.loads(open(metrics).read().splitlines()[-1])
    mem = last["memory"].get("device", {})
    pinned = last["memory"].get("pinned", {})
    planned = plan(oomb, ["--model", model] + flags)
    want = planned["device"]
    return {"loss": last["loss"], "activations": mem.get("activations", {}).get("peak", 0),
            "total": mem.get("total", {}).get("peak", 0), "seconds": seconds,
            "plan_activations": want["activations"], "plan_total": want["total"],
            "pinned_activations": pinned.get("activations", {}).get("peak", 0),
            "plan_pinned_activations": planned["pinned"]["activations"]}
