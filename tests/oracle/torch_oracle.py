#!/usr/bin/python3
"""Independent float64 reference ("oracle") for causal-LM loss and parameter gradients.

Run with Debian's interpreter (torch 1.13 CPU + numpy), not the pyenv `python3`:

    /usr/bin/python3 tests/oracle/torch_oracle.py --model DIR --tokens FILE.bin \
        --out OUT.safetensors [--doc-ids FILE.bin]

DIR        Hugging Face config.json + model.safetensors (or sharded model-*.safetensors
           listed in model.safetensors.index.json); tensors in F32, BF16, F16 (or F64).
--tokens   raw little-endian uint32 token ids, N+1 of them; inputs tokens[0:N],
           targets tokens[1:N+1].  loss = mean cross-entropy over the N targets.
--doc-ids  optional raw little-endian uint32/int32, N of them (one per input token).
           A document is a maximal run of equal consecutive ids.  Attention is
           causal and restricted to the same document, and RoPE positions restart
           at 0 at every document start (what HF's DataCollatorWithFlattening +
           position_ids-based varlen attention does).  The loss still covers all N
           targets (no label is masked at document boundaries).
--mask FILE
           optional raw uint8, n_layers x n_kv_heads x N x N (row-major): an explicit attention mask
           per layer and kv head (query heads use their kv head's): key j is visible to query i only
           where the byte [layer][kv head][i][j] is 1, on top of causality, documents and windows
           (sparse attention's reference: the mask written from the engine's recorded choice).
--ignore-targets-of ID
           optional: the targets at positions whose input token is ID are not trained (the loss is
           the mean over the others), as the engine's --doc-mask drops each separator's target.
--expect-rounded-from DIR
           optional F32 checkpoint of the same parameters: every tensor of --model must be
           BF16 or F16 and hold exactly torch's rounding of DIR's (exit 2 naming the first
           tensor that does not).
--out      safetensors file with F64 tensors: "loss" (shape [1]) and, for every
           parameter P (HF name), "grad." + P with P's shape.  With tied word
           embeddings there is no lm_head.weight; the embedding grad contains the
           lm_head contribution.

Prints one JSON line: {"loss": L, "n_params": <number of scalar parameters>, "n_tokens": N}.
Any input problem -> message on stderr naming the file / field, exit code 2.

    /usr/bin/python3 tests/oracle/torch_oracle.py --jobs FILE

runs many in one interpreter (importing torch takes seconds): each line of FILE is 'LOG ARGS...',
shell words, ARGS the options above and LOG the file its output goes to; a run that fails leaves
its --out unwritten and the others go on (exit 2 if any failed).

Model semantics: transformers' LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM,
written from scratch in plain torch ops, everything in float64 (weights are converted
exactly; BF16 and F16 are decoded by torch's own conversions, independent of the engine's).

RoPE precision convention (mirrors HF, which forces float32 inside the rotary embedding):
  * inv_freq is computed as a float32 tensor with the same torch float32 operations as
    transformers' modeling_rope_utils.py (default / linear / llama3 / yarn);
  * angle = float32(position) * inv_freq, a single float32 multiply (HF's outer product
    inv_freq[:, None] @ position[None, :] has K = 1, so it is exactly this product);
  * cos / sin of that float32 angle are then evaluated in float64, and multiplied by
    attention_scaling (a Python float, i.e. float64) in float64.
Everything after that (q/k rotation, attention, softmax, loss) is float64.
"""

import argparse
import contextlib
import json
import math
import os
import shlex
import struct
import sys
import traceback

import numpy as np
import torch
import torch.nn.functional as F


class OracleError(Exception):
    pass


def fail(msg):
    raise OracleError(msg)


# ----------------------------------------------------------------------------------------
# safetensors reading / writing (no safetensors package: json + numpy)
# ----------------------------------------------------------------------------------------

_ST_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}


def _read_st_header(path):
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                fail(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (hlen,) = struct.unpack("<Q", raw)
            if hlen > size - 8:
                fail(f"{path}: safetensors header length {hlen} exceeds file size {size}")
            header = json.loads(f.read(hlen).decode("utf-8"))
    except OSError as e:
        fail(f"{path}: cannot read: {e.strerror or e}")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"{path}: bad safetensors JSON header: {e}")
    if not isinstance(header, dict):
        fail(f"{path}: safetensors header is not a JSON object")
    header.pop("__metadata__", None)
    data_start = 8 + hlen
    for name, info in header.items():
        try:
            dt = info["dtype"]
            shape = [int(s) for s in info["shape"]]
            b, e = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            fail(f"{path}: tensor '{name}': malformed header entry {info!r}")
        if b < 0 or e < b or data_start + e > size:
            fail(f"{path}: tensor '{name}': data_offsets [{b}, {e}] outside the file")
        if dt in _ST_DTYPES and (e - b) != _ST_DTYPES[dt] * int(np.prod(shape, dtype=np.int64)):
            fail(f"{path}: tensor '{name}': {e - b} bytes do not match dtype {dt} shape {shape}")
    return header, data_start


def _load_st_tensor(path, header, data_start, name):
    info = header[name]
    dt = info["dtype"]
    shape = tuple(int(s) for s in info["shape"])
    b, e = (int(x) for x in info["data_offsets"])
    count = int(np.prod(shape, dtype=np.int64))
    npdt = {"F64": "<f8", "F32": "<f4", "F16": "<i2", "BF16": "<i2"}.get(dt)
    if npdt is None:
        fail(f"{path}: tensor '{name}': unsupported dtype {dt} (need F32, BF16, F16 or F64)")
    try:
        with open(path, "rb") as f:
            f.seek(data_start + b)
            arr = np.fromfile(f, dtype=npdt, count=count)
    except OSError as ex:
        fail(f"{path}: cannot read tensor '{name}': {ex}")
    if arr.size != count:
        fail(f"{path}: tensor '{name}': truncated data")
    if dt in ("BF16", "F16"):
        # torch's own decoding of the 16-bit patterns (exact widening): an independent reference for
        # the engine's bf16 / f16 readers
        t = torch.from_numpy(arr).view(torch.bfloat16 if dt == "BF16" else torch.float16)
        return t.to(torch.float64).numpy().reshape(shape)
    return arr.astype(np.float64).reshape(shape)


def load_raw16(path, header, data_start, name):
    """The raw int16 patterns of a BF16 / F16 tensor."""
    info = header[name]
    b, _ = (int(x) for x in info["data_offsets"])
    count = int(np.prod([int(s) for s in info["shape"]], dtype=np.int64))
    with open(path, "rb") as f:
        f.seek(data_start + b)
        return np.fromfile(f, dtype="<i2", count=count)


def write_safetensors(path, tensors):
    """tensors: list of (name, np.ndarray float64). Writes F64, contiguous data_offsets."""
    header = {}
    off = 0
    blobs = []
    for name, arr in tensors:
        a = np.ascontiguousarray(arr, dtype="<f8")
        nbytes = a.size * 8
        header[name] = {"dtype": "F64", "shape": list(a.shape), "data_offsets": [off, off + nbytes]}
        off += nbytes
        blobs.append(a)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    try:
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(hjson)))
            f.write(hjson)
            for a in blobs:
                f.write(a.tobytes())
    except OSError as e:
        fail(f"{path}: cannot write output: {e.strerror or e}")


class WeightStore:
    """Name -> (file, header) map for single-file or sharded HF checkpoints."""

    def __init__(self, model_dir):
        single = os.path.join(model_dir, "model.safetensors")
        index = os.path.join(model_dir, "model.safetensors.index.json")
        self.files = {}  # path -> (header, data_start)
        self.where = {}  # tensor name -> path
        if os.path.isfile(single):
            self._add(single)
        elif os.path.isfile(index):
            try:
                with open(index) as f:
                    wmap = json.load(f)["weight_map"]
            except (OSError, ValueError, KeyError, TypeError) as e:
                fail(f"{index}: cannot read weight_map: {e}")
            for name, shard in wmap.items():
                p = os.path.join(model_dir, shard)
                if p not in self.files:
                    if not os.path.isfile(p):
                        fail(f"{p}: shard listed in {index} is missing")
                    self._add(p)
                if name not in self.files[p][0]:
                    fail(f"{p}: tensor '{name}' listed in {index} is not in the shard")
                self.where[name] = p
        else:
            fail(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json found")

    def _add(self, path):
        header, start = _read_st_header(path)
        self.files[path] = (header, start)
        for name in header:
            self.where.setdefault(name, path)

    def names(self):
        return set(self.where)

    def shape(self, name):
        p = self.where[name]
        return tuple(int(s) for s in self.files[p][0][name]["shape"])

    def dtype(self, name):
        return self.files[self.where[name]][0][name]["dtype"]

    def load_raw16(self, name):
        p = self.where[name]
        header, start = self.files[p]
        return load_raw16(p, header, start, name)

    def load(self, name):
        p = self.where[name]
        header, start = self.files[p]
        return _load_st_tensor(p, header, start, name)


# ----------------------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------------------


class Cfg:
    pass


def _num(cfg_path, d, key, kind=int, default=None, required=True, positive=True):
    v = d.get(key, None)
    if v is None:
        if required and default is None:
            fail(f"{cfg_path}: field '{key}' is missing")
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        fail(f"{cfg_path}: field '{key}' must be a number, got {v!r}")
    if kind is int:
        if float(v) != int(v):
            fail(f"{cfg_path}: field '{key}' must be an integer, got {v!r}")
        v = int(v)
    else:
        v = float(v)
    if positive and v <= 0:
        fail(f"{cfg_path}: field '{key}' must be > 0, got {v!r}")
    return v


def _bool(cfg_path, d, key, default):
    v = d.get(key, None)
    if v is None:
        return default
    if not isinstance(v, bool):
        fail(f"{cfg_path}: field '{key}' must be true/false, got {v!r}")
    return v


_FAMILIES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "mistral": "mistral", "phi3": "phi3",
             "granite": "granite", "smollm3": "smollm3", "olmo2": "olmo2", "olmo3": "olmo3", "gemma3_text": "gemma3",
             "glm": "glm", "glm4": "glm4"}
_ARCH = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
         "MistralForCausalLM": "mistral", "Phi3ForCausalLM": "phi3", "GraniteForCausalLM": "granite",
         "SmolLM3ForCausalLM": "smollm3", "Olmo2ForCausalLM": "olmo2", "Olmo3ForCausalLM": "olmo3",
         "Gemma3ForCausalLM": "gemma3", "GlmForCausalLM": "glm", "Glm4ForCausalLM": "glm4"}


def load_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            d = json.load(f)
    except FileNotFoundError:
        fail(f"{path}: file not found")
    except (OSError, ValueError) as e:
        fail(f"{path}: cannot parse: {e}")
    if not isinstance(d, dict):
        fail(f"{path}: not a JSON object")
    c = Cfg()
    c.path = path
    mt = d.get("model_type")
    fam = _FAMILIES.get(mt) if isinstance(mt, str) else None
    if fam is None and mt is None:
        archs = d.get("architectures") or []
        for a in archs if isinstance(archs, list) else []:
            if a in _ARCH:
                fam = _ARCH[a]
                break
    if fam is None:
        fail(f"{path}: field 'model_type' = {mt!r} is not one of llama, qwen2, qwen3, mistral, phi3, granite, smollm3, olmo2, olmo3, gemma3_text, glm, glm4")
    c.family = fam

    c.hidden = _num(path, d, "hidden_size")
    c.inter = _num(path, d, "intermediate_size")
    c.n_layers = _num(path, d, "num_hidden_layers")
    c.n_heads = _num(path, d, "num_attention_heads")
    # (GlmConfig's and Glm4Config's default: 2, Gemma3TextConfig's 4; no fallback to num_attention_heads)
    kv_default = {"glm": 2, "glm4": 2, "gemma3": 4}.get(fam, c.n_heads)
    c.n_kv = _num(path, d, "num_key_value_heads", default=kv_default)
    c.vocab = _num(path, d, "vocab_size")
    c.eps = _num(path, d, "rms_norm_eps", kind=float,
                 default={"phi3": 1e-5, "olmo2": 1e-5, "olmo3": 1e-5, "glm": 1.5625e-7, "glm4": 1.5625e-7}.get(fam, 1e-6))
    hd = d.get("head_dim", None)
    if hd is None and fam in ("qwen3", "gemma3", "glm", "glm4"):
        c.head_dim = 256 if fam == "gemma3" else 128  # Qwen3Config's and GlmConfig's default, Gemma3TextConfig's
    elif hd is None:
        if c.hidden % c.n_heads:
            fail(f"{path}: 'head_dim' absent and hidden_size {c.hidden} not divisible by "
                 f"num_attention_heads {c.n_heads}")
        c.head_dim = c.hidden // c.n_heads
    else:
        c.head_dim = _num(path, d, "head_dim")
    if c.head_dim % 2:
        fail(f"{path}: field 'head_dim' must be even for RoPE, got {c.head_dim}")
    if c.n_heads % c.n_kv:
        fail(f"{path}: field 'num_attention_heads' ({c.n_heads}) is not a multiple of "
             f"'num_key_value_heads' ({c.n_kv})")
    # (SmolLM3Config's tie_word_embeddings: True, transformers 5's own default, 4.x's PretrainedConfig's)
    c.tied = _bool(path, d, "tie_word_embeddings", fam in ("smollm3", "gemma3"))  # (and Gemma3TextConfig's)
    c.max_pos = _num(path, d, "max_position_embeddings", required=False)
    if c.max_pos is None and fam == "phi3":
        c.max_pos = 4096  # Phi3Config's default
    if fam == "gemma3":  # Gemma3MLP: ACT2FN[config.hidden_activation]
        if d.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
            fail(f"{path}: field 'hidden_activation' unsupported (only gelu_pytorch_tanh)")
        for k in ("final_logit_softcapping", "attn_logit_softcapping"):
            if d.get(k) is not None:
                fail(f"{path}: field '{k}': this oracle has no softcapping")
    else:
        hidden_act = d.get("hidden_act", "silu")
        if hidden_act not in ("silu", "swish"):
            fail(f"{path}: field 'hidden_act' = {hidden_act!r} unsupported (only silu)")

    # GraniteModel: inputs_embeds * embedding_multiplier; GraniteDecoderLayer: residual + out *
    # residual_multiplier; GraniteAttention: scaling = attention_multiplier; GraniteForCausalLM:
    # logits / logits_scaling. GraniteConfig's defaults: 1.0 each. Other families: none of them.
    c.emb_mult, c.res_mult, c.att_mult, c.logit_div = 1.0, 1.0, None, 1.0
    if fam == "granite":
        c.emb_mult = _num(path, d, "embedding_multiplier", kind=float, default=1.0)
        c.res_mult = _num(path, d, "residual_multiplier", kind=float, default=1.0)
        c.att_mult = _num(path, d, "attention_multiplier", kind=float, default=1.0)
        c.logit_div = _num(path, d, "logits_scaling", kind=float, default=1.0)
    # Gemma3TextScaledWordEmbedding: times torch.tensor(hidden_size ** 0.5) (a float32 scalar);
    # Gemma3Attention: scaling = query_pre_attn_scalar ** -0.5 (Gemma3TextConfig's 256)
    if fam == "gemma3":
        c.emb_mult = float(torch.tensor(c.hidden ** 0.5, dtype=torch.float32))
        c.att_mult = _num(path, d, "query_pre_attn_scalar", kind=float, default=256.0) ** -0.5
    if fam in ("llama", "granite", "smollm3"):  # LlamaAttention / LlamaMLP's biases
        c.attn_bias = _bool(path, d, "attention_bias", False)
        c.o_bias = c.attn_bias
        c.mlp_bias = _bool(path, d, "mlp_bias", False)
    elif fam == "qwen2":
        c.attn_bias, c.o_bias, c.mlp_bias = True, False, False
    elif fam in ("glm", "glm4"):  # GlmAttention: attention_bias (GlmConfig's True) on q, k, v; o_proj and the MLP none
        c.attn_bias = _bool(path, d, "attention_bias", True)
        c.o_bias, c.mlp_bias = False, False
    elif fam in ("qwen3", "olmo2", "olmo3", "gemma3"):  # their attention: attention_bias on q/k/v/o; no MLP bias
        c.attn_bias = _bool(path, d, "attention_bias", False)
        c.o_bias, c.mlp_bias = c.attn_bias, False
    else:
        c.attn_bias, c.o_bias, c.mlp_bias = False, False, False

    # SmolLM3Attention.use_rope = config.no_rope_layers[layer_idx]; SmolLM3Config's default: every
    # no_rope_layer_interval-th layer (1-based) without
    c.rope_layers = [True] * c.n_layers
    if fam == "smollm3":
        nope = d.get("no_rope_layers")
        if nope is None:
            k = _num(path, d, "no_rope_layer_interval", default=4)
            nope = [int((i + 1) % k != 0) for i in range(c.n_layers)]
        if not isinstance(nope, list) or len(nope) < c.n_layers:
            fail(f"{path}: field 'no_rope_layers' must list at least {c.n_layers} entries")
        c.rope_layers = [bool(nope[i]) for i in range(c.n_layers)]

    # Sliding-window attention (Mistral; Qwen2 when use_sliding_window).  Irrelevant
    # whenever N <= window, but applied for fidelity: key j visible to query i iff
    # i - j < window (HF's `kv_idx > q_idx - sliding_window`).
    c.windows = [None] * c.n_layers
    sw = d.get("sliding_window", None)
    layer_types = d.get("layer_types", None)
    c.sliding = [False] * c.n_layers
    if fam in ("olmo3", "gemma3"):  # sliding_window 4096, on layer_types' or three of every four layers
        sw = _num(path, d, "sliding_window") if "sliding_window" in d and sw is not None else (
            None if "sliding_window" in d else 4096)
        # (Gemma3TextConfig: five of every sliding_window_pattern = 6)
        every = _num(path, d, "sliding_window_pattern", default=6) if fam == "gemma3" else 4
        if not isinstance(layer_types, list):
            layer_types = ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(c.n_layers)]
        c.sliding = [t == "sliding_attention" for t in layer_types]
        c.windows = [sw if t == "sliding_attention" else None for t in layer_types]
    elif fam in ("mistral", "phi3") and sw is not None:
        sw = _num(path, d, "sliding_window")
        c.windows = [sw] * c.n_layers
    elif fam in ("qwen2", "qwen3", "smollm3") and _bool(path, d, "use_sliding_window", False) and sw is not None:
        sw = _num(path, d, "sliding_window")
        if isinstance(layer_types, list) and len(layer_types) == c.n_layers:
            c.windows = [sw if t == "sliding_attention" else None for t in layer_types]
        elif fam == "smollm3":  # SmolLM3Config's layer_types: the window on the NoPE layers
            c.windows = [None if c.rope_layers[i] else sw for i in range(c.n_layers)]
        else:
            mwl = _num(path, d, "max_window_layers", default=c.n_layers, positive=False)
            c.windows = [sw if i >= mwl else None for i in range(c.n_layers)]

    # nn.Embedding(vocab, hidden, padding_idx=pad_token_id): that row takes no gradient from the lookup
    pad = d.get("pad_token_id", {"phi3": 32000, "smollm3": 128004, "olmo2": 1, "olmo3": 1, "gemma3": 0, "glm": 151329,
                                 "glm4": 151329}.get(fam))  # (the classes' defaults)
    if pad is not None and not (isinstance(pad, int) and -c.vocab <= pad < c.vocab):
        fail(f"{path}: field 'pad_token_id' = {pad!r} is outside the vocabulary")
    c.pad = None if pad is None else pad % c.vocab
    for k in ("attention_dropout", "resid_pdrop", "embd_pdrop"):  # transformers would drop out in training
        if d.get(k) not in (None, 0, 0.0):
            fail(f"{path}: field '{k}' = {d.get(k)!r}: this oracle has no dropout")
    # OLMo 3: rope_parameters per layer type (transformers 5's form): the full layers' dict is the RoPE,
    # the sliding layers' a default one with its own theta
    # (Gemma 3: the sliding layers' default RoPE of rope_local_base_freq, Gemma3TextConfig's 10000, unless
    # rope_parameters.sliding_attention gives its own)
    rp = d.get("rope_parameters")
    c.sliding_theta = _num(path, d, "rope_local_base_freq", kind=float, default=10000.0) if fam == "gemma3" else None
    if fam in ("olmo3", "gemma3") and isinstance(rp, dict) and ("full_attention" in rp or "sliding_attention" in rp):
        sl = rp.get("sliding_attention") or {}
        if sl.get("rope_type", "default") != "default":
            fail(f"{path}: rope_parameters.sliding_attention must be a default RoPE")
        c.sliding_theta = sl.get("rope_theta", c.sliding_theta or d.get("rope_theta", 500000.0))
        d = dict(d)
        d["rope_parameters"] = rp.get("full_attention") or {}
    c.rope = parse_rope(path, d, c)
    return c


def parse_rope(path, d, c):
    """Resolve the RoPE dict like transformers' RotaryEmbeddingConfigMixin
    (convert_rope_params_to_dict + standardize_rope_params):
      * params = rope_scaling (legacy) if truthy, else rope_parameters (transformers 5), else {};
      * rope_theta: value in the dict, else top-level rope_theta, else 10000;
      * rope_type: 'rope_type', else legacy 'type', else 'default';
      * for llama3 / yarn: a top-level 'original_max_position_embeddings' wins, else the
        dict's value, else max_position_embeddings.
    """
    rs = d.get("rope_scaling", None)
    rp = d.get("rope_parameters", None)
    src = "rope_scaling" if rs else "rope_parameters"
    p = rs or rp or {}
    if not isinstance(p, dict):
        fail(f"{path}: field '{src}' must be an object, got {p!r}")
    p = dict(p)
    theta = p.get("rope_theta", None)
    if theta is None:
        theta = d.get("rope_theta", None)
        if theta is None:
            # (Olmo3Config's default_theta, Gemma3TextConfig's)
            theta = {"olmo3": 500000.0, "gemma3": 1000000.0}.get(c.family, 10000.0)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 1:
        fail(f"{path}: field 'rope_theta' must be a number > 1, got {theta!r}")
    p["rope_theta"] = theta
    rtype = p.get("rope_type", p.get("type", "default"))
    if rtype is None:
        rtype = "default"
    if c.family == "phi3" and rtype in ("su", "yarn"):  # Phi3Config's backward compatibility
        rtype = "longrope"
    p["rope_type"] = rtype
    if rtype not in ("default", "linear", "llama3", "yarn", "longrope"):
        fail(f"{path}: field '{src}.rope_type' = {rtype!r} unsupported "
             f"(supported: default, linear, llama3, yarn, longrope)")
    # partial_rotary_factor: the dict's (transformers 5), else the top-level one; only Phi3's and GLM's
    # attention rotates part of a head (apply_rotary_pos_emb splits q and k at cos.shape[-1]); GlmConfig's
    # default 0.5
    prf = p.get("partial_rotary_factor", None)
    if prf is None:
        prf = d.get("partial_rotary_factor", None)
    if prf is None:
        prf = 0.5 if c.family in ("glm", "glm4") else 1.0
    if prf != 1.0 and c.family not in ("phi3", "glm", "glm4"):
        fail(f"{path}: field 'partial_rotary_factor' = {prf!r} unsupported on {c.family} (only 1.0)")
    if isinstance(prf, bool) or not isinstance(prf, (int, float)) or not 0 < prf <= 1:
        fail(f"{path}: field 'partial_rotary_factor' must be in (0, 1], got {prf!r}")
    c.rope_dim = int(c.head_dim * prf)
    if c.rope_dim < 2 or c.rope_dim % 2:
        fail(f"{path}: field 'partial_rotary_factor' = {prf!r} turns {c.rope_dim} dims (even, >= 2 needed)")
    if rtype in ("llama3", "yarn"):
        top = d.get("original_max_position_embeddings", None)
        if top is not None:
            p["original_max_position_embeddings"] = top
        elif p.get("original_max_position_embeddings", None) is None:
            if c.max_pos is None:
                fail(f"{path}: field 'original_max_position_embeddings' (or "
                     f"'max_position_embeddings') is required for rope_type {rtype}")
            p["original_max_position_embeddings"] = c.max_pos
        v = p["original_max_position_embeddings"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            fail(f"{path}: field '{src}.original_max_position_embeddings' must be > 0, got {v!r}")

    def need(key):
        v = p.get(key, None)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            fail(f"{path}: field '{src}.{key}' is required for rope_type {rtype} "
                 f"(number), got {v!r}")
        return v

    if rtype == "longrope":
        # _compute_longrope_parameters: the config's (top-level) original_max_position_embeddings, the
        # factor max_position_embeddings over it, and the short / long per-frequency factors
        for key in ("short_factor", "long_factor"):
            v = p.get(key, None)
            if not isinstance(v, list) or len(v) != c.rope_dim // 2:
                fail(f"{path}: field '{src}.{key}' must be a list of {c.rope_dim // 2} numbers, got {v!r}")
        # transformers 5's standardize_rope_params: a top-level original_max_position_embeddings wins
        # (Phi3Config has one whatever the file says: 4096 by default), else the dict's, else
        # max_position_embeddings; _compute_longrope_parameters: the dict's factor, else max over that
        top = d.get("original_max_position_embeddings", None)
        if top is None and c.family == "phi3":
            top = 4096
        orig = top if top is not None else p.get("original_max_position_embeddings", None) or c.max_pos
        p["switch"] = orig
        if p.get("factor", None) is None:
            p["factor"] = c.max_pos / orig
    elif rtype == "linear":
        need("factor")
    elif rtype == "llama3":
        need("factor")
        need("low_freq_factor")
        need("high_freq_factor")
        if p["high_freq_factor"] == p["low_freq_factor"]:
            fail(f"{path}: fields '{src}.high_freq_factor' and 'low_freq_factor' must differ")
    elif rtype == "yarn":
        if p.get("factor", None) is None:
            # transformers: factor = max_position_embeddings / original_max_position_embeddings
            if c.max_pos is None:
                fail(f"{path}: field '{src}.factor' missing and no max_position_embeddings")
            p["factor"] = c.max_pos / p["original_max_position_embeddings"]
        need("factor")
        for k in ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"):
            v = p.get(k, None)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                fail(f"{path}: field '{src}.{k}' must be a number, got {v!r}")
    return p


# ----------------------------------------------------------------------------------------
# RoPE: inv_freq (float32, as transformers computes it) and attention_scaling
# ----------------------------------------------------------------------------------------


def _default_inv_freq(base, dim):
    # 1 / base^(2i/dim), in float32 (int64 arange -> float32, divide, pow with float base).
    expo = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim
    return 1.0 / (base ** expo)


def rope_inv_freq(c, seq_len=None):
    """Returns (inv_freq: float32 tensor [rope_dim/2], attention_scaling: python float) for a
    sequence of seq_len positions (longrope: its long factors past the switch length)."""
    p = c.rope
    base = p["rope_theta"]
    dim = c.rope_dim
    rtype = p["rope_type"]
    if rtype == "longrope":
        orig = p["switch"]
        att = p.get("attention_factor", None)
        if att is None:
            factor = p["factor"]
            att = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
        ext = p["long_factor"] if seq_len is not None and seq_len > orig else p["short_factor"]
        ext = torch.tensor(ext, dtype=torch.float32)
        shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
        return 1.0 / (ext * base ** shape), float(att)
    if rtype == "default":
        return _default_inv_freq(base, dim), 1.0
    if rtype == "linear":
        inv = _default_inv_freq(base, dim)
        inv = inv / p["factor"]
        return inv, 1.0
    if rtype == "llama3":
        inv = _default_inv_freq(base, dim)
        factor = p["factor"]
        lo_f = p["low_freq_factor"]
        hi_f = p["high_freq_factor"]
        old_ctx = p["original_max_position_embeddings"]
        lo_wave = old_ctx / lo_f  # python floats
        hi_wave = old_ctx / hi_f
        wave = 2 * math.pi / inv  # float32 tensor
        # long wavelengths (low frequency): scaled down by factor; short: unchanged
        scaled = torch.where(wave > lo_wave, inv / factor, inv)
        smooth = (old_ctx / wave - lo_f) / (hi_f - lo_f)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = torch.logical_and(torch.logical_not(wave < hi_wave),
                                   torch.logical_not(wave > lo_wave))
        return torch.where(medium, blended, scaled), 1.0
    if rtype == "yarn":
        factor = p["factor"]
        orig = p["original_max_position_embeddings"]
        att = p.get("attention_factor", None)
        ms = p.get("mscale", None)
        ms_all = p.get("mscale_all_dim", None)

        def mscale_of(scale, m=1):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if att is None:
            if ms and ms_all:
                att = float(mscale_of(factor, ms) / mscale_of(factor, ms_all))
            else:
                att = mscale_of(factor)
        beta_fast = p.get("beta_fast", None) or 32
        beta_slow = p.get("beta_slow", None) or 1
        truncate = p.get("truncate", True)

        def corr_dim(n_rot):
            # dimension index whose wavelength completes n_rot rotations over orig positions
            return (dim * math.log(orig / (n_rot * 2 * math.pi))) / (2 * math.log(base))

        lo = corr_dim(beta_fast)
        hi = corr_dim(beta_slow)
        if truncate:
            lo = math.floor(lo)
            hi = math.ceil(hi)
        lo = max(lo, 0)
        hi = min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
        extra_w = 1 - ramp  # weight of the un-scaled (extrapolation) frequency
        pos_freqs = base ** (torch.arange(0, dim, 2).to(torch.float32) / dim)
        inv_extra = 1.0 / pos_freqs
        inv_inter = 1.0 / (factor * pos_freqs)
        inv = inv_inter * (1 - extra_w) + inv_extra * extra_w
        return inv, float(att)
    fail(f"{c.path}: rope_type {rtype!r} unsupported")


def rope_cos_sin(c, positions):
    """positions: int64 numpy [N] -> cos, sin float64 tensors [N, rope_dim]."""
    inv, scaling = rope_inv_freq(c, int(positions.max()) + 1)  # transformers: max(position_ids) + 1
    assert inv.dtype == torch.float32
    pos32 = torch.from_numpy(positions.astype(np.float32))
    ang32 = pos32[:, None] * inv[None, :]  # float32 multiply (HF precision)
    ang = ang32.to(torch.float64)
    # (GLM's apply_rotary_pos_emb: cos[..., :rope_dim / 2].repeat_interleave(2), frequency i on dims 2i, 2i + 1)
    ang = ang.repeat_interleave(2, dim=-1) if c.family in ("glm", "glm4") else torch.cat([ang, ang], dim=-1)
    return torch.cos(ang) * scaling, torch.sin(ang) * scaling


# ----------------------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------------------


def param_specs(c):
    """Ordered list of (HF name, shape)."""
    H, I, V, hd = c.hidden, c.inter, c.vocab, c.head_dim
    qd, kvd = c.n_heads * hd, c.n_kv * hd
    specs = [("model.embed_tokens.weight", (V, H))]
    for i in range(c.n_layers):
        pre = f"model.layers.{i}."
        if c.family not in ("olmo2", "olmo3"):  # (OLMo 2 / 3: no norm before attention; Gemma 3: both)
            specs.append((pre + "input_layernorm.weight", (H,)))
        if c.family == "phi3":  # Phi3Attention.qkv_proj and Phi3MLP.gate_up_proj: fused, no biases
            specs.append((pre + "self_attn.qkv_proj.weight", (qd + 2 * kvd, H)))
            specs.append((pre + "self_attn.o_proj.weight", (H, qd)))
            specs.append((pre + "post_attention_layernorm.weight", (H,)))
            specs.append((pre + "mlp.gate_up_proj.weight", (2 * I, H)))
            specs.append((pre + "mlp.down_proj.weight", (H, I)))
            continue
        for nm, od in (("q_proj", qd), ("k_proj", kvd), ("v_proj", kvd)):
            specs.append((pre + f"self_attn.{nm}.weight", (od, H)))
            if c.attn_bias:
                specs.append((pre + f"self_attn.{nm}.bias", (od,)))
        specs.append((pre + "self_attn.o_proj.weight", (H, qd)))
        if c.o_bias:
            specs.append((pre + "self_attn.o_proj.bias", (H,)))
        if c.family in ("glm", "glm4"):  # GlmMLP: gate_up_proj fused; Glm4DecoderLayer: a norm after each branch too
            specs.append((pre + "post_attention_layernorm.weight", (H,)))
            specs.append((pre + "mlp.gate_up_proj.weight", (2 * I, H)))
            specs.append((pre + "mlp.down_proj.weight", (H, I)))
            if c.family == "glm4":
                specs.append((pre + "post_self_attn_layernorm.weight", (H,)))
                specs.append((pre + "post_mlp_layernorm.weight", (H,)))
            continue
        if c.family in ("qwen3", "gemma3"):  # Qwen3RMSNorm(head_dim) of every q and k head (Gemma3RMSNorm's)
            specs.append((pre + "self_attn.q_norm.weight", (hd,)))
            specs.append((pre + "self_attn.k_norm.weight", (hd,)))
        if c.family in ("olmo2", "olmo3"):  # Olmo2RMSNorm(heads * head_dim) of the whole q and k
            specs.append((pre + "self_attn.q_norm.weight", (qd,)))
            specs.append((pre + "self_attn.k_norm.weight", (kvd,)))
        specs.append((pre + "post_attention_layernorm.weight", (H,)))
        if c.family == "gemma3":
            specs.append((pre + "pre_feedforward_layernorm.weight", (H,)))
        if c.family in ("olmo2", "olmo3", "gemma3"):
            specs.append((pre + "post_feedforward_layernorm.weight", (H,)))
        for nm, shp, bshp in (("gate_proj", (I, H), (I,)), ("up_proj", (I, H), (I,)),
                              ("down_proj", (H, I), (H,))):
            specs.append((pre + f"mlp.{nm}.weight", shp))
            if c.mlp_bias:
                specs.append((pre + f"mlp.{nm}.bias", bshp))
    specs.append(("model.norm.weight", (H,)))
    if not c.tied:
        specs.append(("lm_head.weight", (V, H)))
    return specs


def load_params(c, store, model_dir):
    specs = param_specs(c)
    have = store.names()
    params = {}
    for name, shape in specs:
        if name not in have:
            fail(f"{model_dir}: parameter '{name}' missing from the safetensors checkpoint")
        if store.shape(name) != tuple(shape):
            fail(f"{store.where[name]}: tensor '{name}' has shape {list(store.shape(name))}, "
                 f"config {c.path} implies {list(shape)}")
        params[name] = torch.from_numpy(store.load(name)).requires_grad_(True)
    extra = sorted(have - set(params))
    ignorable = {"lm_head.weight"} if c.tied else set()
    extra = [n for n in extra if n not in ignorable and not n.endswith("rotary_emb.inv_freq")]
    if extra:
        print(f"torch_oracle: warning: ignoring {len(extra)} unused tensor(s) in {model_dir}: "
              f"{', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}", file=sys.stderr)
    return specs, params


def load_lora(path, params):
    """A PEFT LoRA adapter directory: adapter_config.json (r, lora_alpha, use_rslora) and
    adapter_model.safetensors. Returns (scale, adapters {module path: (A, B)}, trainable {name:
    tensor}): every adapter tensor and every PEFT modules_to_save tensor (base_model.model.NAME,
    which replaces the base's NAME in `params`), float64 and differentiated."""
    cfg_path = os.path.join(path, "adapter_config.json")
    try:
        with open(cfg_path) as f:
            cfg = json.load(f)
        r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"{cfg_path}: cannot read r and lora_alpha: {e}")
    scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    st = os.path.join(path, "adapter_model.safetensors")
    header, start = _read_st_header(st)
    adapters, trainable = {}, {}
    prefix = "base_model.model."
    for key in sorted(header):
        if not key.startswith(prefix):
            fail(f"{st}: tensor '{key}' does not start with {prefix}")
        t = torch.from_numpy(_load_st_tensor(st, header, start, key)).requires_grad_(True)
        trainable[key if ".lora_" in key else key[len(prefix):]] = t
        if ".lora_A.weight" in key or ".lora_B.weight" in key:
            module = key[len(prefix):].rsplit(".lora_", 1)[0]  # model.layers.0.self_attn.q_proj
            a, b = adapters.get(module, (None, None))
            adapters[module] = (t, b) if ".lora_A." in key else (a, t)
        else:
            name = key[len(prefix):]
            if name not in params:
                fail(f"{st}: tensor '{key}' names no parameter of the model")
            params[name] = t  # trained in place of the base's
    for module, (a, b) in adapters.items():
        if a is None or b is None:
            fail(f"{st}: {module} has only one of lora_A and lora_B")
    return scale, adapters, trainable


# LoRA's dropout masks, drawn as oomb's backend/dropout_mask.h specifies them (written from that
# text, sharing no code): splitmix64's finalizer after its increment, on 64-bit unsigned integers.
M64 = (1 << 64) - 1
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def mix64(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def dropout_scale(window_key, layer, module, n_rows, n_cols, p):
    """[n_rows, n_cols] float64: 1 / (1 - p) where the value at (position, feature) is kept, else 0."""
    # a fused Phi-3 linear (one adapter, one mask) is keyed as its first part
    index = {"qkv_proj": 0, "gate_up_proj": 4}.get(module)
    km = mix64(window_key ^ (8 * layer + (LORA_TARGETS.index(module) if index is None else index)))
    threshold = int(p * 4294967296.0)
    keep = [[(mix64(km ^ mix64((t << 32) | i)) >> 32) >= threshold for i in range(n_cols)] for t in range(n_rows)]
    return torch.tensor(keep, dtype=torch.float64) / (1.0 - p)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def linear(x, w, b=None):
    y = x @ w.t()
    return y if b is None else y + b


def rotate_half(x, interleaved=False):
    if interleaved:  # GLM's: (x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)
        return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin, interleaved=False):
    """x: [heads, N, hd]; the first cos.shape[-1] dims turned, the rest passed through (Phi3's and GLM's
    apply_rotary_pos_emb; the whole head when rope_dim = hd, as Llama's)."""
    r = cos.shape[-1]
    return torch.cat([x[..., :r] * cos + rotate_half(x[..., :r], interleaved) * sin, x[..., r:]], dim=-1)


def forward_loss(c, P, inputs, targets, positions, segments, lora=None, extra_mask=None):
    """inputs/targets/positions/segments: int64 numpy [N]. Returns scalar float64 loss. lora:
    (scale, {module path: (A, B)}[, dropout p, window key]) adds scale * (x' A^T) B^T to each
    adapted linear, x' = x, or with dropout x times its mask (dropout_scale). extra_mask:
    [n_layers, n_kv, N, N] bool, keys visible beside causality, documents and windows (--mask)."""
    N = inputs.shape[0]
    hd, nh, nkv = c.head_dim, c.n_heads, c.n_kv
    rep = nh // nkv
    cos, sin = rope_cos_sin(c, positions)  # [N, hd]
    # OLMo 3's sliding layers (by layer type): the plain RoPE of rope_theta, or of their own theta where
    # rope_parameters gives one per layer type (as transformers' Olmo3Model and OLMo-core run them)
    plain = None
    if c.family in ("olmo3", "gemma3"):
        pc = Cfg()
        pc.__dict__.update(c.__dict__)
        pc.rope = {"rope_type": "default",
                   "rope_theta": c.sliding_theta if c.sliding_theta is not None else c.rope["rope_theta"]}
        plain = rope_cos_sin(pc, positions)
    ii = torch.arange(N)[:, None]
    jj = torch.arange(N)[None, :]
    seg = torch.from_numpy(segments)
    base_mask = (jj <= ii) & (seg[None, :] == seg[:, None])
    masks = {}
    scale = 1.0 / math.sqrt(hd) if c.att_mult is None else c.att_mult

    x = F.embedding(torch.from_numpy(inputs), P["model.embed_tokens.weight"], padding_idx=c.pad)  # [N, H]
    x = x * c.emb_mult
    gemma = c.family == "gemma3"
    glm = c.family in ("glm", "glm4")  # (interleaved RoPE)
    # Gemma3RMSNorm: x rsqrt(mean x^2 + eps) (1 + w)
    norm = (lambda x, w, eps: rms_norm(x, 1.0 + w, eps)) if gemma else rms_norm
    for li in range(c.n_layers):
        pre = f"model.layers.{li}."
        g = lambda n: P.get(pre + n)  # noqa: E731

        def linear(x, w, b=None, module=None, pre=pre):
            y = x @ w.t()
            if b is not None:
                y = y + b
            if lora is not None and module is not None and (pre + module) in lora[1]:
                a_, b_ = lora[1][pre + module]
                if len(lora) > 2 and lora[2] > 0:
                    x = x * dropout_scale(lora[3], int(pre.split(".")[2]), module.split(".")[-1], x.shape[0],
                                          x.shape[1], lora[2])
                y = y + lora[0] * ((x @ a_.t()) @ b_.t())
            return y

        win = c.windows[li]
        if win not in masks:
            masks[win] = base_mask if win is None else base_mask & ((ii - jj) < win)
        allowed = masks[win]
        if extra_mask is not None:  # [n_kv, N, N] -> per query head
            allowed = allowed[None, :, :] & extra_mask[li].repeat_interleave(rep, dim=0)

        # (OLMo 2, Olmo2DecoderLayer: each branch reads the residual stream and its output is normalized)
        olmo2 = c.family in ("olmo2", "olmo3")
        h = x if olmo2 else norm(x, g("input_layernorm.weight"), c.eps)
        if c.family == "phi3":  # qkv[..., :qd], then k, then v (Phi3Attention.forward)
            qkv = linear(h, g("self_attn.qkv_proj.weight"), None, "self_attn.qkv_proj")
            q, k, v = qkv[:, :nh * hd], qkv[:, nh * hd:(nh + nkv) * hd], qkv[:, (nh + nkv) * hd:]
        else:
            q = linear(h, g("self_attn.q_proj.weight"), g("self_attn.q_proj.bias"), "self_attn.q_proj")
            k = linear(h, g("self_attn.k_proj.weight"), g("self_attn.k_proj.bias"), "self_attn.k_proj")
            v = linear(h, g("self_attn.v_proj.weight"), g("self_attn.v_proj.bias"), "self_attn.v_proj")
        if olmo2:  # Olmo2Attention: q_norm(q_proj(x)), k_norm(k_proj(x)) over the whole projection
            q = rms_norm(q, g("self_attn.q_norm.weight"), c.eps)
            k = rms_norm(k, g("self_attn.k_norm.weight"), c.eps)
        q = q.view(N, nh, hd)
        k = k.view(N, nkv, hd)
        if c.family in ("qwen3", "gemma3"):  # q_norm / k_norm over head_dim, before RoPE
            q = norm(q, g("self_attn.q_norm.weight"), c.eps)
            k = norm(k, g("self_attn.k_norm.weight"), c.eps)
        q = q.transpose(0, 1)  # [nh, N, hd]
        k = k.transpose(0, 1)  # [nkv, N, hd]
        v = v.view(N, nkv, hd).transpose(0, 1)
        if c.rope_layers[li]:  # (SmolLM3's NoPE layers: none)
            lc, ls = plain if plain is not None and c.sliding[li] else (cos, sin)
            q = apply_rope(q, lc, ls, glm)
            k = apply_rope(k, lc, ls, glm)
        # repeat_kv: query head j uses kv head j // rep
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
        s = (q @ k.transpose(1, 2)) * scale     # [nh, N, N]
        s = s.masked_fill(~allowed, float("-inf"))
        a = torch.softmax(s, dim=-1)
        o = (a @ v).transpose(0, 1).reshape(N, nh * hd)
        y = linear(o, g("self_attn.o_proj.weight"), g("self_attn.o_proj.bias"), "self_attn.o_proj")
        # (Gemma3DecoderLayer: post_attention_layernorm of the branch, pre_feedforward_layernorm before the MLP)
        # (Glm4DecoderLayer: post_self_attn_layernorm of the branch; its post_attention_layernorm is the MLP's input's)
        x = x + (norm(y, g("post_attention_layernorm.weight"), c.eps) if olmo2 or gemma
                 else rms_norm(y, g("post_self_attn_layernorm.weight"), c.eps) if c.family == "glm4" else y * c.res_mult)

        h = x if olmo2 else norm(x, g("pre_feedforward_layernorm.weight" if gemma else "post_attention_layernorm.weight"),
                                 c.eps)
        if c.family in ("phi3", "glm", "glm4"):  # Phi3MLP, GlmMLP: gate, up = gate_up_proj(x).chunk(2, dim=-1)
            gate, up = linear(h, g("mlp.gate_up_proj.weight"), None, "mlp.gate_up_proj").chunk(2, dim=-1)
        else:
            gate = linear(h, g("mlp.gate_proj.weight"), g("mlp.gate_proj.bias"), "mlp.gate_proj")
            up = linear(h, g("mlp.up_proj.weight"), g("mlp.up_proj.bias"), "mlp.up_proj")
        act = F.gelu(gate, approximate="tanh") if gemma else F.silu(gate)  # (gelu_pytorch_tanh)
        y = linear(act * up, g("mlp.down_proj.weight"), g("mlp.down_proj.bias"), "mlp.down_proj")
        x = x + (norm(y, g("post_feedforward_layernorm.weight"), c.eps) if olmo2 or gemma
                 else rms_norm(y, g("post_mlp_layernorm.weight"), c.eps) if c.family == "glm4" else y * c.res_mult)

    x = norm(x, P["model.norm.weight"], c.eps)
    w_out = P["model.embed_tokens.weight"] if c.tied else P["lm_head.weight"]
    logits = (x @ w_out.t()) / c.logit_div
    return F.cross_entropy(logits, torch.from_numpy(targets), reduction="mean", ignore_index=-100)


# ----------------------------------------------------------------------------------------
# inputs
# ----------------------------------------------------------------------------------------


def read_u32_file(path, what):
    try:
        size = os.path.getsize(path)
    except OSError:
        fail(f"{path}: {what} file not found")
    if size % 4:
        fail(f"{path}: {what} file size {size} is not a multiple of 4 (raw uint32 expected)")
    try:
        return np.fromfile(path, dtype="<u4").astype(np.int64)
    except OSError as e:
        fail(f"{path}: cannot read {what} file: {e}")


def doc_layout(doc_ids):
    """Documents = maximal runs of equal consecutive ids. Returns (segments, positions)."""
    N = doc_ids.shape[0]
    start = np.ones(N, dtype=bool)
    start[1:] = doc_ids[1:] != doc_ids[:-1]
    segments = np.cumsum(start) - 1
    idx = np.arange(N)
    seg_start = np.maximum.accumulate(np.where(start, idx, 0))
    return segments.astype(np.int64), (idx - seg_start).astype(np.int64)


def check_rounding(store, src, names, args):
    """Every BF16 / F16 tensor of --model must hold exactly torch's round-to-nearest-even encoding of
    the same tensor of --expect-rounded-from (F32): checks the engine's low-precision save."""
    for name in names:
        dt = store.dtype(name)
        if dt not in ("BF16", "F16"):
            fail(f"{args.model}: tensor '{name}' is {dt}, --expect-rounded-from needs BF16 or F16")
        want = torch.from_numpy(src.load(name).astype(np.float32)).to(
            torch.bfloat16 if dt == "BF16" else torch.float16).view(torch.int16).numpy().ravel()
        got = store.load_raw16(name).ravel()
        bad = np.nonzero(got != want)[0]
        if bad.size:
            i = int(bad[0])
            fail(f"{store.where[name]}: tensor '{name}': {bad.size} of {got.size} {dt} values differ from "
                 f"torch's rounding of {args.expect_rounded_from} (first at {i}: file 0x{int(got[i]) & 0xffff:04x}, "
                 f"torch 0x{int(want[i]) & 0xffff:04x})")


def run(args):
    if not os.path.isdir(args.model):
        fail(f"{args.model}: model directory not found")
    c = load_config(args.model)
    toks = read_u32_file(args.tokens, "tokens")
    if toks.shape[0] < 2:
        fail(f"{args.tokens}: need at least 2 token ids (N+1 with N >= 1), got {toks.shape[0]}")
    bad = np.nonzero(toks >= c.vocab)[0]
    if bad.size:
        fail(f"{args.tokens}: token id {int(toks[bad[0]])} at index {int(bad[0])} >= vocab_size "
             f"{c.vocab} (config {c.path})")
    inputs, targets = toks[:-1], toks[1:]
    N = inputs.shape[0]
    if args.doc_ids:
        d = read_u32_file(args.doc_ids, "doc-ids")
        if d.shape[0] != N:
            fail(f"{args.doc_ids}: has {d.shape[0]} doc ids, expected N = {N} "
                 f"(one per input token of {args.tokens})")
        segments, positions = doc_layout(d)
    else:
        segments = np.zeros(N, dtype=np.int64)
        positions = np.arange(N, dtype=np.int64)

    extra_mask = None
    if args.mask:
        want = c.n_layers * c.n_kv * N * N
        try:
            raw = np.fromfile(args.mask, dtype=np.uint8)
        except OSError as e:
            fail(f"{args.mask}: cannot read mask file: {e}")
        if raw.size != want:
            fail(f"{args.mask}: has {raw.size} bytes, expected layers x kv heads x N x N = {want}")
        extra_mask = torch.from_numpy(raw.reshape(c.n_layers, c.n_kv, N, N) != 0)
    if args.ignore_targets_of is not None:
        targets = np.where(inputs == args.ignore_targets_of, -100, targets)

    store = WeightStore(args.model)
    specs, P = load_params(c, store, args.model)
    if args.expect_rounded_from:
        check_rounding(store, WeightStore(args.expect_rounded_from), [n for n, _ in specs], args)

    lora, wrt = None, {n: P[n] for n, _ in specs}
    if args.lora:  # the adapters (and PEFT's modules_to_save) train; the rest is frozen
        scale, adapters, wrt = load_lora(args.lora, P)
        lora = (scale, adapters)
        if args.lora_dropout_key is not None:  # training: the adapter's lora_dropout, with oomb's masks
            with open(os.path.join(args.lora, "adapter_config.json")) as f:
                p = float(json.load(f).get("lora_dropout") or 0.0)
            if not 0.0 <= p < 1.0:
                fail(f"{args.lora}/adapter_config.json: lora_dropout {p} is not in [0, 1)")
            lora = (scale, adapters, p, int(args.lora_dropout_key))
    torch.set_grad_enabled(True)
    loss = forward_loss(c, P, inputs, targets, positions, segments, lora, extra_mask)
    if not torch.isfinite(loss):
        fail(f"{args.model}: loss is not finite ({loss.item()})")
    order = list(wrt)
    grads = torch.autograd.grad(loss, [wrt[n] for n in order], allow_unused=True)
    out = [("loss", np.array([loss.item()], dtype=np.float64))]
    n_params = 0
    for name, gr in zip(order, grads):
        if gr is None:
            gr = torch.zeros_like(wrt[name])
        out.append(("grad." + name, gr.detach().numpy()))
        n_params += wrt[name].numel()
    write_safetensors(args.out, out)
    print(json.dumps({"loss": loss.item(), "n_params": n_params, "n_tokens": int(N)}))


def parser():
    ap = argparse.ArgumentParser(description="float64 PyTorch oracle: causal-LM loss + grads")
    ap.add_argument("--model", required=True, help="dir with config.json + safetensors")
    ap.add_argument("--tokens", required=True, help="raw LE uint32 token ids, N+1 of them")
    ap.add_argument("--out", required=True, help="output .safetensors (F64)")
    ap.add_argument("--doc-ids", dest="doc_ids", default=None,
                    help="raw LE uint32/int32 document ids, N of them")
    ap.add_argument("--mask", default=None, help="raw uint8 mask, layers x kv heads x N x N (1 = visible)")
    ap.add_argument("--ignore-targets-of", dest="ignore_targets_of", type=int, default=None,
                    help="targets at positions whose input is this id are not trained")
    ap.add_argument("--lora", default=None,
                    help="a PEFT LoRA adapter directory: its tensors train (gradients of those only)")
    ap.add_argument("--lora-dropout-key", dest="lora_dropout_key", default=None,
                    help="with --lora: train with its lora_dropout, the masks of this window key (oomb's "
                    "backend/dropout_mask.h; decimal uint64)")
    ap.add_argument("--expect-rounded-from", dest="expect_rounded_from", default=None,
                    help="dir of an F32 checkpoint: --model's BF16/F16 tensors must be torch's rounding of it")
    return ap


def run_one(args):
    try:
        run(args)
    except OracleError as e:
        print(f"torch_oracle: error: {e}", file=sys.stderr)
        return 2
    return 0


def run_jobs(path):
    """--jobs FILE: one run per line, 'LOG ARGS...' (shell words): each run's output goes to its LOG.
    One interpreter for them all (importing torch takes seconds); a run that fails leaves its --out
    unwritten, its error in its LOG, and the others go on. Exit 2 if any failed."""
    try:
        with open(path) as f:
            lines = [ln for ln in f.read().splitlines() if ln.strip()]
    except OSError as e:
        print(f"torch_oracle: error: --jobs {path}: {e.strerror}", file=sys.stderr)
        return 2
    failed = 0
    for i, line in enumerate(lines, 1):
        try:
            words = shlex.split(line)
            log, argv = words[0], words[1:]
            out = open(log, "w")
        except (ValueError, IndexError, OSError) as e:  # this line unreadable: the others go on
            failed += 1
            print(f"torch_oracle: --jobs {path} line {i}: {e}", file=sys.stderr)
            continue
        with out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = run_one(parser().parse_args(argv))
            except SystemExit as e:  # argparse's refusal (its message already on the log)
                code = e.code if isinstance(e.code, int) else 2
            except Exception:  # a bug here: the traceback on the log, the other runs go on
                traceback.print_exc()
                code = 1
        if code != 0:
            failed += 1
            print(f"torch_oracle: --jobs {path} line {i} failed (exit {code}): see {log}", file=sys.stderr)
    return 2 if failed else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--jobs":
        return run_jobs(argv[1])
    return run_one(parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
