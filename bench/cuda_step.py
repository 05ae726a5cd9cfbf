#!/usr/bin/env python3
"""One training step per sequence on one GPU: oomb (chunk-recurrent, paged) beside Hugging Face
transformers + PyTorch (bf16, SDPA attention, gradient checkpointing), in one run, on random-init
Qwen2.5-0.5B-, 1.5B- and 7B-shaped models. Columns: N, tokens/s, MFU, peak device memory.

    python3 bench/cuda_step.py --oomb gpu-bundle/oomb [--models 0.5b,1.5b,7b] [--lengths 8192,32768,131072]
                               [--chunks 4096,8192] [--budget 500] [--per-run 300] [--out DIR]
                               [--table FILE.md] [--jsonl FILE.jsonl] [--precision bf16|fp32]
                               [--offloads none,params,kv,params]

Every configuration runs in its own process under a time limit, and the whole run ends within
--budget seconds (points it cannot reach say so); a run that does not finish says why (timeout,
out of memory, or its error). Each row is printed, and appended to --table / --jsonl, the moment
it is measured, so a run killed from outside keeps what it had. Lengths run shortest first; a
line (oomb at one chunk size, or Hugging Face) that runs out of memory or time stops for the
longer lengths of that model, and an oomb point whose time, scaled as N^2 from the last one
measured, would not fit in what is left of the budget is skipped and says so. oomb points
whose `oomb plan` exceeds the GPU's memory are skipped without running (oomb keeps float32
weights, gradients and AdamW moments on the device: 16 bytes a parameter, 119 GiB for 7B, and
with --precision bf16, the default here, a bf16 copy of the weight matrices beside them: the
matmuls run as bf16 GEMMs with fp32 accumulation; the table's line says which). --offloads adds
oomb lines with `--offload` (`params`: masters and gradients in pinned host memory, moments in host memory, the
layers streamed through two device slots; `kv`; `kv,params`), each planned and measured the same way:
a model that does not fit resident may fit offloaded, and the same model both ways gives the
cost of streaming (separate values with `;` for lists: `none;params;kv,params`); `params+sync` is
`--offload params --no-overlap-update` (the host's optimizer update after the step rather than
beside the next step's first layers: the overlap's gain); `params+chunk` and `params+layer` take
that sweep order (`--sweep`; otherwise auto, which takes the layer order where the host holds it).

oomb steps: 2 for N <= 32K (the row is the second, warm step), 1 beyond (its step time dwarfs
the warm-up). Each step trains on a window of its own (random tokens): the second step's loss, on
tokens the model never saw, stays near ln(151643) = 11.93 unless a query sees its own target.
Hugging Face: one warm-up step, then one timed step; the model is built from its config (random
init, bf16) straight on the GPU, its loss is transformers' own (labels=ids).

FLOPs (both lines alike): train/flops.h's formula, linear layers + causal attention, forward +
backward, recomputation not counted; MFU against the GPU's dense bf16 peak (the same table as
oomb's). The oomb line trains with AdamW; Hugging Face's too (torch.optim.AdamW, fused) unless
it cannot hold the optimizer state, which the table then says. Peak device memory: oomb's own
accounting of its device allocations (`--metrics` memory.device.total.peak); for Hugging Face
torch.cuda.max_memory_allocated() over the timed step. Neither counts the CUDA context.
"""
import argparse
import json
import os
import subprocess
import sys
import time

# oomb init's presets (src/model/init.cpp): Qwen2.5's published shapes
PRESETS = {
    "0.5b": ("qwen2.5-0.5b", dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                  num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                                  tie_word_embeddings=True)),
    "1.5b": ("qwen2.5-1.5b", dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                                  num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                                  tie_word_embeddings=True)),
    "7b": ("qwen2.5-7b", dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                              num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                              tie_word_embeddings=False)),
    # tiny-qwen2's shape: not a benchmark, the rehearsal's (scripts/gpu_rehearsal.sh runs this script on
    # simt_oomb, the CUDA backend's code on the CPU, with --no-hf)
    "tiny": ("tiny-qwen2", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, vocab_size=128, tie_word_embeddings=True,
                                max_position_embeddings=4096, rope_theta=10000.0)),
}
# the rest of a Qwen2.5 config.json, as oomb init writes it; RoPE in both transformers' forms
COMMON = dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu",
              max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0, rope_scaling=None,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, use_sliding_window=False,
              sliding_window=None, bos_token_id=None, eos_token_id=None, torch_dtype="bfloat16")
DATA_VOCAB = 151643  # token ids drawn below this: inside both vocabularies


def offload_args(off, plan=False):  # an --offloads entry as oomb's flags: "params+sync" no overlapped update,
    base, *mods = off.split("+")      # "+chunk" / "+layer" the sweep order (--sweep; else auto), "+keep"
    sweeps = [m for m in mods if m in ("chunk", "layer")]  # --keep-attention ("none+keep": alone)
    return ((["--offload", base] if base and base != "none" else [])
            + (["--no-overlap-update"] if "sync" in mods and not plan else [])
            + (["--sweep", sweeps[0]] if sweeps else []) + (["--keep-attention"] if "keep" in mods else []))


def hf_config(mk):
    cfg = dict(COMMON, **PRESETS[mk][1])
    cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
    cfg["rope_parameters"] = dict(cfg["rope_parameters"], rope_theta=cfg["rope_theta"])
    return cfg


def train_flops(cfg, n):  # src/train/flops.cpp
    d, L, H, G, D, I, V = (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
                           cfg["num_key_value_heads"], cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
                           cfg["intermediate_size"], cfg["vocab_size"])
    linear = L * (d * H * D + 2 * d * G * D + H * D * d + 3 * d * I) + V * d  # lm_head counted even when tied
    return 3.0 * (2.0 * n * linear + 4.0 * L * H * D * n * (n + 1) / 2.0)


def peak_bf16(name):  # src/backend/cuda/cuda_device.cu's peak_bf16_flops
    if "H200" in name:
        return 989.4e12
    if "H100" in name:
        return 756e12 if "PCIe" in name else 835e12 if "NVL" in name else 989.4e12
    if "A100" in name:
        return 312e12
    return 0.0


def gpu():  # name and memory (bytes) from nvidia-smi: no CUDA context in this process
    try:
        line = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        name, mib = line.rsplit(",", 1)
        return name.strip(), int(float(mib)) * 2**20
    except Exception:  # noqa: BLE001 - no nvidia-smi, or an odd answer: MFU and the plan check go unused
        return "unknown GPU", 0


HF_CHILD = r'''
import json, sys, time
import torch, transformers
cfg_dir, n, with_opt = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
state = {"phase": "build", "opt_state": False}
try:
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.from_pretrained(cfg_dir)
    cfg.use_cache = False
    with torch.device("cuda"):  # random init straight on the GPU
        try:  # `dtype` since transformers 4.56; `torch_dtype` before
            m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        except TypeError:
            m = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    m = m.cuda()
    assert next(m.parameters()).dtype == torch.bfloat16, next(m.parameters()).dtype
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.train()  # HF checkpoints only in training mode
    opt = torch.optim.AdamW(m.parameters(), lr=1e-5, fused=True) if with_opt else None
    ids = torch.randint(0, min(cfg.vocab_size, 151643), (1, n), device="cuda")
    def step():
        state["phase"] = "forward + backward"
        m(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        if opt is not None:
            state["phase"] = "optimizer step"
            opt.step()
            state["opt_state"] = True
            opt.zero_grad(set_to_none=True)
        else:
            m.zero_grad(set_to_none=True)
    step(); torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter(); step(); torch.cuda.synchronize(); dt = time.perf_counter() - t
    print(json.dumps({"s": dt, "peak": torch.cuda.max_memory_allocated(),
                      "attn": getattr(m.config, "_attn_implementation", None),
                      "checkpointing": bool(getattr(m, "is_gradient_checkpointing", True))}), flush=True)
except torch.cuda.OutOfMemoryError:
    print(json.dumps({"oom": state["phase"], "opt_state": state["opt_state"]}), flush=True)
    sys.exit(3)
'''


def run(cmd, timeout, env=None):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, timeout), env=env)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out, "timeout"


def last_line(s, default="failed"):
    lines = [l for l in s.strip().splitlines() if l.strip()]
    return (lines[-1] if lines else default)[:120].replace("|", "/")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oomb", default="gpu-bundle/oomb")
    ap.add_argument("--models", default="0.5b,1.5b,7b")
    ap.add_argument("--lengths", default="8192,32768,131072")
    ap.add_argument("--chunks", default="4096,8192")
    ap.add_argument("--budget", type=float, default=500, help="seconds for the whole run")
    ap.add_argument("--per-run", type=float, default=300, help="seconds for one configuration at most")
    ap.add_argument("--out", default=None, help="scratch (models, token files); default: a new temporary folder")
    ap.add_argument("--table", default=None, help="also append the table's lines here as they come")
    ap.add_argument("--jsonl", default=None, help="append one JSON object per row here as they come")
    ap.add_argument("--no-hf", action="store_true", help="oomb only")
    ap.add_argument("--no-oomb", action="store_true", help="Hugging Face only")
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp32"],
                    help="oomb's --precision: bf16 (bf16 GEMMs on cuBLASLt, fp32 accumulation) or fp32")
    ap.add_argument("--offloads", default="none",
                    help="oomb lines by --offload, separated by ';' (none, params, kv, kv,params; +keep: "
                         "--keep-attention, e.g. none+keep; attention+keep or kv,attention+keep: its store in "
                         "pinned memory)")
    a = ap.parse_args()
    offloads = ["" if o.strip() in ("", "none") else o.strip() for o in a.offloads.split(";")]
    for o in offloads:
        base, *mods = o.split("+")
        if (o and base != "none" and any(x not in ("kv", "params", "attention") for x in base.split(","))) or \
                ("attention" in base.split(",") and "keep" not in mods) or \
                any(m not in ("sync", "chunk", "layer", "keep") for m in mods) or len(set(mods)) < len(mods) or \
                ("chunk" in mods and "layer" in mods) or \
                (set(mods) - {"keep"} and "params" not in base.split(",")):
            ap.error(f"--offloads: unknown '{o}' (none, params, kv, kv,params; with params, +sync: the host update "
                     "after the step, --no-overlap-update; +chunk or +layer: --sweep; +keep: --keep-attention, "
                     "\"none+keep\" alone; attention (kv,attention+keep): the kept outputs offloaded, only with "
                     "+keep; ';' between lines)")
    for mk in a.models.split(","):
        if mk not in PRESETS:
            ap.error(f"--models: unknown '{mk}' (known: {', '.join(PRESETS)})")
    start = time.time()
    left = lambda: a.budget - (time.time() - start)  # noqa: E731
    if a.out is None:
        import tempfile
        a.out = tempfile.mkdtemp(prefix="oomb-bench-")
    os.makedirs(a.out, exist_ok=True)

    def emit(line, row=None):
        print(line, flush=True)
        if a.table:
            with open(a.table, "a") as f:
                f.write(line + "\n")
        if a.jsonl and row is not None:
            with open(a.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")

    name, mem = gpu()
    peak = peak_bf16(name)
    try:  # the device machine's copy of the tree may have no .git, nor git
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    stamp = os.path.join(os.path.dirname(os.path.abspath(a.oomb)), "COMMIT")  # written by scripts/gpu_bundle.sh
    if os.path.exists(stamp):
        commit = open(stamp).read().strip()
    emit(f"\ndevice {name} ({mem / 2**30:.0f} GiB, bf16 peak {peak / 1e12:.0f} TFLOP/s), "
         f"{time.strftime('%Y-%m-%d %H:%M')}, oomb {commit or 'unknown commit'}, budget {a.budget:.0f} s\n")
    emit("| model | line | N | C | tokens/s | MFU | peak device memory | note |")
    emit("|---|---|---|---|---|---|---|---|")

    def row(mk, line, n, c="", tps=None, flops=0.0, mem_b=None, note="", **extra):
        mfu = f"{100 * flops * tps / n / peak:.1f}%" if tps and peak else ""
        emit(f"| {mk} | {line} | {n} | {c} | {f'{tps:.0f}' if tps else ''} | {mfu} | "
             f"{f'{mem_b / 2**30:.2f} GiB' if mem_b else ''} | {note} |",
             dict(model=mk, line=line, N=n, C=c or None, tokens_per_s=tps, mfu=(flops * tps / n / peak) if tps and peak else None,
                  peak_bytes=mem_b, note=note, device=name, commit=commit, **extra))

    # the table's lines: oomb bf16 or oomb fp32, then --offload X where one is given
    line_of = lambda off: "oomb " + a.precision + " ".join([""] + offload_args(off))  # noqa: E731
    lengths = sorted(int(x) for x in a.lengths.split(","))
    chunks = [int(x) for x in a.chunks.split(",")] if not a.no_oomb else []
    variants = [(c0, off) for off in offloads for c0 in chunks]
    hf_env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
                  TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")
    for mk in a.models.split(","):
        preset, _ = PRESETS[mk]
        cfg = hf_config(mk)
        hf_dir = os.path.join(a.out, mk + "-hf")
        os.makedirs(hf_dir, exist_ok=True)
        with open(os.path.join(hf_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)

        # which oomb points fit the GPU, by oomb's own planner (no GPU needed)
        plans = {}  # (N, C, offload): the device's bytes
        for n in lengths:
            for c, off in variants:
                rc, out, err = run([a.oomb, "plan", "--preset", preset, "--seq-len", str(n), "--chunk-size",
                                    str(min(c, n)), "--device", "cuda", "--precision", a.precision, "--json"]
                                   + offload_args(off, plan=True), 30)
                try:
                    j = json.loads(out.strip().splitlines()[-1]) if rc == 0 else None
                    plans[n, min(c, n), off] = j["device"]["total"] if j else None
                except (ValueError, IndexError, KeyError, TypeError):
                    plans[n, min(c, n), off] = None
        fits = lambda n, c, off: (not mem or plans.get((n, c, off)) is None  # noqa: E731
                                  or plans[n, c, off] <= 0.97 * mem)
        mdir = os.path.join(a.out, mk)
        init_error = None
        if variants and any(fits(n, min(c, n), off) for n in lengths for c, off in variants):
            if not os.path.exists(os.path.join(mdir, "model.safetensors")):
                if left() < 60:
                    init_error = "budget spent before oomb init"
                else:
                    rc, out, err = run([a.oomb, "init", "--preset", preset, "--dtype", "bf16", "--out", mdir, "--force"],
                                       min(600, left() - 30))
                    if rc != 0:
                        init_error = "oomb init: " + ("timeout" if rc is None else last_line(err))
            if init_error is None:  # the model oomb trains is the one Hugging Face builds
                got = json.load(open(os.path.join(mdir, "config.json")))
                bad = [k for k in PRESETS[mk][1] if got.get(k) != cfg[k]]
                if bad:
                    init_error = f"oomb's config.json differs from this script's in {', '.join(bad)}"

        oomb_last, oomb_stopped, hf_stopped, hf_opts = {}, {}, None, ("1", "0")
        for n in lengths:
            flops = train_flops(cfg, n)
            steps = 2 if n <= 32768 else 1
            done = set()
            for c0, off in variants:
                c, oomb_line, key = min(c0, n), line_of(off), (c0, off)
                if (c, off) in done:
                    continue
                done.add((c, off))
                if not fits(n, c, off):
                    row(mk, oomb_line, n, c, note=f"skipped: oomb plan needs {plans[n, c, off] / 2**30:.0f} GiB, the GPU has "
                        f"{mem / 2**30:.0f}")
                    continue
                if init_error:
                    row(mk, oomb_line, n, c, note=init_error)
                    continue
                if key in oomb_stopped:
                    row(mk, oomb_line, n, c, note=f"stopped: {oomb_stopped[key]} at a shorter N")
                    continue
                if left() < 30:
                    row(mk, oomb_line, n, c, note="budget spent")
                    continue
                if key in oomb_last:  # N^2 from the last measured length: an upper bound (linear layers go as N)
                    n0, s0 = oomb_last[key]
                    guess = s0 * (n / n0) ** 2 * steps + 15
                    if guess > min(a.per_run, left()):
                        row(mk, oomb_line, n, c, note=f"skipped: ~{guess:.0f} s expected (from N={n0}), "
                            f"{min(a.per_run, left()):.0f} s left")
                        continue
                # a window of its own for each step: a later step's loss is on tokens the model never
                # saw, so it stays near ln(DATA_VOCAB) unless the model sees its targets (a causality leak)
                toks = os.path.join(a.out, f"tokens_{mk}_{n}x{steps}.bin")
                if not os.path.exists(toks):
                    import array, random  # raw little-endian uint32 (--data-format u32); no numpy needed
                    rng = random.Random(n)
                    with open(toks, "wb") as f:
                        vocab = min(DATA_VOCAB, cfg["vocab_size"])
                        array.array("I", (rng.randrange(vocab) for _ in range(n * steps + 1))).tofile(f)
                met = os.path.join(a.out, f"m_{mk}_{n}_{c}_{off.replace(',', '-') or 'none'}.jsonl")
                if os.path.exists(met):
                    os.remove(met)
                t = time.time()
                rc, out, err = run([a.oomb, "train", "--device", "cuda", "--model", mdir, "--data", toks,
                                    "--data-format", "u32", "--seq-len", str(n), "--chunk-size", str(c),
                                    "--steps", str(steps), "--optimizer", "adamw", "--precision", a.precision,
                                    "--metrics", met] + offload_args(off),
                                   min(a.per_run, left() - 5))
                wall = time.time() - t
                lines = []
                if os.path.exists(met):
                    for l in open(met):
                        try:
                            lines.append(json.loads(l))
                        except ValueError:
                            pass
                # which attention ran: OOMB_CUDA_ATTENTION, and the shapes cuDNN refused (each said
                # once on stderr; those calls ran on oomb's tensor-core kernels)
                refused = [l for l in err.splitlines() if l.startswith("oomb: cuDNN attention for")]
                att = dict(attention=os.environ.get("OOMB_CUDA_ATTENTION", "auto"), cudnn_refused=len(refused),
                           cudnn_refused_first=refused[0][:300] if refused else None)
                why = None
                if rc != 0:
                    why = "timeout" if rc is None else ("out of memory" if "out of memory" in err.lower()
                                                         else last_line(err))
                if lines:
                    j = lines[-1]
                    dev = j.get("memory", {}).get("device", {}).get("total", {}).get("peak", 0)
                    note = (f"step {len(lines)} of {steps}, then {why}" if why else
                            "one step, its warm-up included" if steps == 1 else "")
                    if refused:
                        note = (note + "; " if note else "") + f"cuDNN refused {len(refused)} shapes (oomb's kernels ran them)"
                    # --offload params: the host's AdamW (the previous step's, beside this one) and the wait for it
                    hu = j.get("host_update") or {}
                    if hu.get("update_s") is not None:
                        note = ((note + "; " if note else "") +
                                f"host update {hu['update_s']:.2f} s, waited {hu.get('waited_s', 0):.2f} s")
                    row(mk, oomb_line, n, c, j["tokens_per_s"], flops, dev, note, step_s=j["tokens"] / j["tokens_per_s"],
                        wall_s=wall, oomb_mfu=j.get("mfu"), loss=j.get("loss"), host_update=hu or None,
                        moved=j.get("moved"), **att)
                    oomb_last[key] = (n, j["tokens"] / j["tokens_per_s"])
                else:
                    row(mk, oomb_line, n, c, note=why or "no metrics written", wall_s=wall, **att)
                if why in ("timeout", "out of memory"):
                    oomb_stopped[key] = why

            if a.no_hf:
                continue
            if hf_stopped:
                row(mk, "HF+PyTorch", n, note=f"stopped: {hf_stopped} at a shorter N")
                continue
            # the logits alone: bf16 (N, V), their float32 copy for the loss and its gradient
            logits_b = n * PRESETS[mk][1]["vocab_size"] * (2 + 4 + 4)
            if mem and logits_b > mem:
                row(mk, "HF+PyTorch", n, note=f"not run: its logits alone need {logits_b / 2**30:.0f} GiB, "
                                              f"the GPU has {mem / 2**30:.0f}")
                hf_stopped = "logits larger than the GPU"
                continue
            for with_opt in hf_opts:
                if left() < 30:
                    row(mk, "HF+PyTorch", n, note="budget spent")
                    break
                t = time.time()
                rc, out, err = run([sys.executable, "-c", HF_CHILD, hf_dir, str(n), with_opt],
                                   min(a.per_run, left() - 5), env=hf_env)
                wall = time.time() - t
                try:
                    j = json.loads(out.strip().splitlines()[-1])
                except (ValueError, IndexError):
                    j = {}
                if rc == 0 and "s" in j:
                    if with_opt == "0":
                        hf_opts = ("0",)  # nor will it at a longer N
                    row(mk, "HF+PyTorch", n, "", n / j["s"], flops, j["peak"],
                        "" if with_opt == "1" else "forward + backward only: AdamW did not fit", step_s=j["s"],
                        wall_s=wall, attn=j.get("attn"), checkpointing=j.get("checkpointing"))
                    break
                if "oom" in j:
                    # without AdamW's state the first step is the same: retry only when the state was what broke it
                    if with_opt == "1" and (j["opt_state"] or j["oom"] == "optimizer step"):
                        continue
                    why = f"out of memory ({j['oom']})"
                else:
                    why = "timeout" if rc is None else last_line(err)
                row(mk, "HF+PyTorch", n, note=why if with_opt == "1" else why + ", without AdamW", wall_s=wall)
                hf_stopped = why  # out of memory, out of time, or an error that a longer N would repeat
                break
    emit(f"\n(bench ran {time.time() - start:.0f} s of its {a.budget:.0f} s budget)")


if __name__ == "__main__":
    main()
