#!/usr/bin/env python3
"""Hugging Face golden fixtures: tiny random-init Llama, Qwen2, Qwen3, Phi-3, Granite, SmolLM3, OLMo 2 and 3 and Gemma 3
models built
with transformers' own modelling code, saved in Hugging Face format with their loss, logits and every gradient, so
that tests/test_hf_golden.cpp checks oomb against Hugging Face in every CI run (on the CPU).

Needs PyTorch, transformers and safetensors (the GPU machine has all three; Debian has no
transformers). Everything is computed on the CPU from the float32 weights that are saved, loaded
in float64 (so the fixtures do not depend on the GPU). Hugging Face's own code still rounds a few
steps to float32 whatever the weights' dtype (the RoPE angles, RMSNorm, the attention softmax),
which puts the reference about 1e-7 (relative) from exact float64, far inside the test's
tolerances; the loss is computed here in float64 from the float64 logits (transformers' loss
would round the logits to float32) and checked against transformers' own `labels=` loss:

    python3 tools/golden_hf.py [--out tests/fixtures/hf]

For each model, DIR = OUT/<name>/ holds config.json, model.safetensors (float32, as saved by
save_pretrained) and reference.safetensors:
    input_ids  I64 (N)        the sequence; the loss predicts ids[1:] from ids[:-1] (labels = ids)
    loss       F64 (1)        mean cross-entropy over the N - 1 targets
    logits     F64 (N, V)
    grad/NAME  F64 (shape)    d loss / d parameter, for every parameter by its Hugging Face name
                              (a tied lm_head has none: its gradient is in the embedding's)
and, where made (see make_bf16 and make_lora): reference_bf16.safetensors (PyTorch's bf16 on the
GPU) and lora/ (a PEFT adapter with its float64 reference).
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file

TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5


def rope(theta, partial=None):
    # transformers 5 takes RoPE as rope_parameters (rope_theta is still read for compatibility), the partial
    # rotation in it; 4.x takes rope_theta and a top-level partial_rotary_factor
    extra = {} if partial is None else {"partial_rotary_factor": partial}
    return dict(rope_parameters={"rope_type": "default", "rope_theta": theta, **extra}) if TRANSFORMERS_5 \
        else dict(rope_theta=theta, **extra)


def longrope(theta, short, long, partial=None):
    # (4.x's Phi3Config wants exactly type, short_factor and long_factor in rope_scaling, and the partial
    # rotation at the top level; 5 reads it from rope_parameters)
    p = {"short_factor": short, "long_factor": long}
    extra = {} if partial is None else {"partial_rotary_factor": partial}
    if TRANSFORMERS_5:
        return dict(rope_parameters={**p, **extra, "rope_type": "longrope", "rope_theta": theta})
    return dict(rope_theta=theta, rope_scaling={**p, "type": "longrope"}, **extra)


MODELS = {  # name: (transformers' config class, model class, config arguments, rope theta config.json holds)
    # untied embeddings, no biases, grouped-query attention (4 query heads over 2 kv heads)
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
                   rms_norm_eps=1e-5, tie_word_embeddings=False, **rope(10000.0)), 10000.0),
    # tied embeddings, q/k/v biases (Qwen2's), one kv head
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=256,
                   rms_norm_eps=1e-6, tie_word_embeddings=True, **rope(1000000.0)), 1000000.0),
    # Qwen3: per-head q/k RMSNorm before RoPE, head_dim 16 apart from hidden / heads (32 / 4), no biases
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",
              dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                   rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False,
                   **rope(1000000.0)), 1000000.0),
    # Phi-3: fused qkv_proj and gate_up_proj, LongRoPE switching at 16 positions (N = 40: the long
    # factors), a pad token the ids hold (nn.Embedding's padding_idx: its row takes no lookup gradient)
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  original_max_position_embeddings=16, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  pad_token_id=5, bos_token_id=1, eos_token_id=2,
                  **longrope(10000.0, [1.0, 1.1, 1.2, 1.3], [1.5, 3.5, 9.5, 19.5])), 10000.0),
    # Phi-4-mini's kind: RoPE over half of each head (partial_rotary_factor; 4 of 8 dims, so two LongRoPE
    # factors each), tied embeddings
    "phi3_partial": ("Phi3Config", "Phi3ForCausalLM",
                     dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                          original_max_position_embeddings=16, rms_norm_eps=1e-5, tie_word_embeddings=True,
                          pad_token_id=5, bos_token_id=1, eos_token_id=2,
                          **longrope(10000.0, [1.0, 1.3], [2.5, 17.5], partial=0.5)), 10000.0),
    # Granite: a Llama with muP's four multipliers (none a power of two; attention's apart from
    # 1/sqrt(head_dim)), tied embeddings, token 0 the pad (as IBM's files)
    "granite": ("GraniteConfig", "GraniteForCausalLM",
                dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                     rms_norm_eps=1e-5, tie_word_embeddings=True, pad_token_id=0, bos_token_id=0, eos_token_id=0,
                     embedding_multiplier=3.5, residual_multiplier=0.37, attention_multiplier=0.21,
                     logits_scaling=2.7, **rope(10000.0)), 10000.0),
    # SmolLM3: its first layer NoPE (no RoPE on q and k), with the sliding window SmolLM3Config puts on the
    # NoPE layers (9 of N = 40 positions), untied, a pad token the ids hold (SmolLM3Config's 128004 is
    # past this vocabulary)
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM",
                dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                     rms_norm_eps=1e-6, tie_word_embeddings=False, pad_token_id=5, bos_token_id=1, eos_token_id=2,
                     no_rope_layers=[0, 1], use_sliding_window=True, sliding_window=9, mlp_bias=False,
                     attention_bias=False, **rope(10000.0)), 10000.0),
    # OLMo 2: each branch's output normalized (no norm before attention), q and k normalized over the
    # whole projection before RoPE, attention_bias on q/k/v/o, Olmo2Config's pad (1) the ids may hold
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM",
              dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                   rms_norm_eps=1e-5, tie_word_embeddings=False, pad_token_id=1, bos_token_id=None, eos_token_id=2,
                   attention_bias=True, **rope(500000.0)), 500000.0),
    # OLMo 3: OLMo 2 with a sliding window (9 of N = 40 positions) on its first layer, as layer_types
    # says, whose RoPE is the plain one of its own theta, the full layer's YaRN past 16 positions
    # (transformers 5's rope_parameters per layer type; 4.x's Olmo3 has one RoPE for all layers)
    "olmo3": ("Olmo3Config", "Olmo3ForCausalLM",
              dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                   rms_norm_eps=1e-6, tie_word_embeddings=True, pad_token_id=1, bos_token_id=None, eos_token_id=2,
                   sliding_window=9, layer_types=["sliding_attention", "full_attention"],
                   **(dict(rope_parameters={
                       "full_attention": {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 2.0,
                                          "original_max_position_embeddings": 16},
                       "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
                      if TRANSFORMERS_5 else rope(500000.0))), 500000.0),
    # Gemma 3: each branch's input and output normalized, every norm scaling by 1 + w (weights about 0 here),
    # q and k normalized per head, GeGLU, the embedding times sqrt(32), the scores times
    # query_pre_attn_scalar^-1/2 (20); a sliding window (9 of N = 40) on its first layer, turned by the plain
    # RoPE of its own theta, the full layer's scaled linearly x2; tied, Gemma3TextConfig's pad (0) the ids hold
    # (head_dim 16: q as wide as 2 hidden, as Gemma's heads are wider than its hidden size)
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                    rms_norm_eps=1e-6, tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=1,
                    sliding_window=9, layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=20,
                    **(dict(rope_parameters={
                        "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 2.0},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}})
                       if TRANSFORMERS_5 else dict(rope_theta=1000000.0, rope_local_base_freq=100.0,
                                                   rope_scaling={"rope_type": "linear", "factor": 2.0}))), 1000000.0),
    # GLM: RoPE on interleaved pairs of the first half of each head (8 of 16 dims), q/k/v biases and none on
    # o_proj, gate and up fused (gate_up_proj), untied, a pad token the ids hold
    "glm": ("GlmConfig", "GlmForCausalLM",
            dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                 rms_norm_eps=1e-5, tie_word_embeddings=False, pad_token_id=5, bos_token_id=None, eos_token_id=2,
                 attention_bias=True, **rope(10000.0, partial=0.5)), 10000.0),
    # GLM-4 (0414): GLM with a norm after each branch as well (post_self_attn_layernorm, post_mlp_layernorm;
    # post_attention_layernorm the MLP's input's), tied
    "glm4": ("Glm4Config", "Glm4ForCausalLM",
             dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                  rms_norm_eps=1e-5, tie_word_embeddings=True, pad_token_id=5, bos_token_id=None, eos_token_id=2,
                  attention_bias=True, **rope(10000.0, partial=0.5)), 10000.0),
}
N = 40


def saved_theta(cfg):  # rope_theta as config.json holds it, in either transformers' form
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and isinstance(rp.get("full_attention"), dict):  # (per layer type: OLMo 3's, Gemma 3's)
        rp = rp["full_attention"]
        return float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    for k in ("rope_parameters", "rope_scaling"):
        if isinstance(cfg.get(k), dict) and "rope_theta" in cfg[k]:
            return float(cfg[k]["rope_theta"])
    return float(cfg.get("rope_theta", 10000.0))


def load_f64(model_cls, d):
    kw = dict(attn_implementation="eager")
    try:  # `dtype` since transformers 4.56 (`torch_dtype` is deprecated in 5)
        m = model_cls.from_pretrained(d, dtype=torch.float64, **kw)
    except TypeError:
        m = model_cls.from_pretrained(d, torch_dtype=torch.float64, **kw)
    return m.to(torch.float64)  # a no-op where the dtype was taken


def make(name, out):
    config_name, model_name, kw, theta = MODELS[name]
    # (by name: a transformers without a family fails that family alone, not the script's import)
    missing = [c for c in (config_name, model_name) if not hasattr(transformers, c)]
    assert not missing, f"{name}: transformers {transformers.__version__} has no {', '.join(missing)}"
    config_cls, model_cls = getattr(transformers, config_name), getattr(transformers, model_name)
    torch.manual_seed(1234)
    config = config_cls(**kw)
    if "layer_types" in kw:  # (a transformers that ignores layer_types would make another model)
        assert list(config.layer_types) == kw["layer_types"], f"{name}: layer_types {config.layer_types}"
    model = model_cls(config).to(torch.float32)
    if name in ("glm", "glm4"):  # (a transformers that dropped the partial rotation would turn whole heads)
        inv = model.model.rotary_emb.inv_freq
        assert inv.numel() == 4, f"{name}: RoPE turns {2 * inv.numel()} dims of each head, not 8 of 16"
    with torch.no_grad():  # larger than the default init, so that every path carries signal
        for p in model.parameters():
            p.normal_(0.0, 0.15) if p.dim() > 1 else p.normal_(1.0 if p.abs().max() == 1 else 0.0, 0.1)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d)  # safetensors is the default (and, in transformers 5, the only format)
    assert os.path.exists(os.path.join(d, "model.safetensors")), f"{d}: no model.safetensors: {os.listdir(d)}"
    with open(os.path.join(d, "config.json")) as f:
        saved = json.load(f)
    assert saved_theta(saved) == theta, f"{name}: config.json has rope theta {saved_theta(saved)}, not {theta}"
    # as oomb reads config.json (save_pretrained leaves out some values equal to the defaults)
    # (absent: the family's default as oomb takes it, tied for SmolLM3 and Gemma 3; save_pretrained drops a
    # value equal to the class's default)
    tied_by_default = name in ("smollm3", "gemma3")
    assert saved.get("tie_word_embeddings", tied_by_default) == kw["tie_word_embeddings"], \
        f"{name}: tie_word_embeddings lost"

    # the reference: the saved float32 weights, computed in float64, eager attention
    ref = load_f64(model_cls, d)
    ref.train(False)
    assert all(p.dtype == torch.float64 for p in ref.parameters()), f"{name}: not every parameter is float64"
    names = [n for n, _ in ref.named_parameters()]
    # tied: one parameter, whose gradient sums both uses (as oomb's embedding gradient does)
    assert ("lm_head.weight" in names) != config.tie_word_embeddings, f"{name}: lm_head tied wrongly: {names}"
    g = torch.Generator().manual_seed(99)
    ids = torch.randint(0, config.vocab_size, (1, N), generator=g)
    if getattr(config, "pad_token_id", None) is not None:  # the pad token among the inputs, twice
        ids[0, 3] = ids[0, 20] = config.pad_token_id
    logits = ref(input_ids=ids, use_cache=False).logits[0].to(torch.float64)  # float64 already: the weights'
    assert logits.shape == (N, config.vocab_size), logits.shape
    loss = F.cross_entropy(logits[:-1], ids[0, 1:])  # what labels=ids means: mean over the N - 1 targets
    loss.backward()
    with torch.no_grad():  # the same definition as transformers' own loss (computed there in float32)
        hf_loss = ref(input_ids=ids, labels=ids, use_cache=False).loss.item()
    assert abs(hf_loss - loss.item()) <= 1e-5 * abs(loss.item()), f"{name}: loss {loss.item()} vs HF {hf_loss}"
    tensors = {"input_ids": ids[0].to(torch.int64).contiguous(),
               "loss": loss.detach().reshape(1).contiguous(),
               "logits": logits.detach().contiguous()}
    for pname, p in ref.named_parameters():
        assert p.grad is not None, f"{name}: {pname} has no gradient"
        tensors["grad/" + pname] = p.grad.detach().contiguous()
    save_file(tensors, os.path.join(d, "reference.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    print(f"{name}: loss {loss.item():.6f} (transformers' own {hf_loss:.6f}), {len(tensors) - 3} gradients -> {d}")
    for extra in (make_bf16, make_lora):  # each optional: a failure leaves the float64 fixtures above intact
        try:
            extra(name, d, model_cls, ids)
        except Exception as e:  # noqa: BLE001
            print(f"{name}: {extra.__name__} not made: {type(e).__name__}: {e}")


def make_bf16(name, d, model_cls, ids):
    """PyTorch's own bf16 on the GPU, the yardstick of FlashAttention's error rule (oomb's bf16 error
    against float64 at most twice PyTorch's): DIR/reference_bf16.safetensors holds, for the same ids,
    pure/loss F64 (1) and pure/grad/NAME F32 (every parameter in bf16, eager attention: the model as
    from_pretrained(dtype=bfloat16) loads it, RoPE's frequencies in float32 as transformers computes them,
    not Module.to(bfloat16), which would round those buffers too and loosen the yardstick), and
    autocast/loss, autocast/grad/NAME (float32 weights under torch.autocast(bfloat16)); and, since one
    loss is one draw of the rounding, 16 more sequences: seqs/input_ids I64 (16, N), their float64
    losses seqs/loss64 and PyTorch's seqs/pure_loss, seqs/autocast_loss F64 (16)."""
    if not torch.cuda.is_available():
        print(f"{name}: no GPU, so no bf16 reference")
        return
    def load(dtype):
        m = model_cls.from_pretrained(d, dtype=dtype, attn_implementation="eager").cuda()
        assert all(p.dtype == dtype for p in m.parameters()), f"{name}: not every parameter is {dtype}"
        return m

    out = {}
    for mode in ("pure", "autocast"):
        m = load(torch.bfloat16 if mode == "pure" else torch.float32)
        if mode == "pure":  # (the buffers' dtypes, for the record: RoPE's inv_freq float32 where HF keeps it)
            bufs = sorted({f"{b}: {t.dtype}" for b, t in m.named_buffers() if t.is_floating_point()})
            print(f"{name}: bf16 model's floating buffers: {', '.join(bufs) or 'none'}")
        m.train(False)
        x = ids.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "autocast"):
            logits = m(input_ids=x, use_cache=False).logits[0]
        loss = F.cross_entropy(logits[:-1].float(), x[0, 1:])  # as transformers' loss: float32 logits
        loss.backward()
        out[mode + "/loss"] = loss.detach().double().reshape(1).cpu()
        for pname, p in m.named_parameters():
            out[f"{mode}/grad/{pname}"] = p.grad.detach().float().cpu().contiguous()
    g = torch.Generator().manual_seed(7)
    vocab = model_cls.config_class.from_pretrained(d).vocab_size
    seqs = torch.randint(0, vocab, (16, ids.shape[1]), generator=g)
    ref = load_f64(model_cls, d)
    ref.train(False)
    pure, auto = load(torch.bfloat16), load(torch.float32)
    l64, lp, la = [], [], []
    with torch.no_grad():
        for s in seqs:
            x = s[None]
            l64.append(F.cross_entropy(ref(input_ids=x, use_cache=False).logits[0][:-1], s[1:]).item())
            xc = x.cuda()
            lp.append(F.cross_entropy(pure(input_ids=xc, use_cache=False).logits[0][:-1].float(), xc[0, 1:]).item())
            with torch.autocast("cuda", dtype=torch.bfloat16):
                lg = auto(input_ids=xc, use_cache=False).logits[0]
            la.append(F.cross_entropy(lg[:-1].float(), xc[0, 1:]).item())
    out["seqs/input_ids"] = seqs.to(torch.int64).contiguous()
    for k, v in (("seqs/loss64", l64), ("seqs/pure_loss", lp), ("seqs/autocast_loss", la)):
        out[k] = torch.tensor(v, dtype=torch.float64)
    save_file(out, os.path.join(d, "reference_bf16.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                        "device": torch.cuda.get_device_name()})
    print(f"{name}: bf16 references, loss pure {out['pure/loss'].item():.6f} autocast {out['autocast/loss'].item():.6f}")


LORA = {  # the adapter each model gets, as PEFT's LoraConfig arguments
    "llama": dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                     "up_proj", "down_proj"]),
    "qwen2": dict(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], use_rslora=True),
    # Phi-3's fused linears, one adapter each (A shared by q, k and v; B their rows)
    "phi3": dict(r=4, lora_alpha=8, target_modules=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]),
    "granite": dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj", "down_proj"]),
    # GLM: its fused gate_up_proj one adapter (B: gate's and up's rows)
    "glm": dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "gate_up_proj", "down_proj"]),
    # Gemma 3: every linear, its GeGLU's gate and up included
    "gemma3": dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                      "down_proj"]),
}


def make_lora(name, d, model_cls, ids):
    """A PEFT LoRA adapter on the model (when PEFT is installed), for oomb's --lora: DIR/lora/ holds
    adapter_config.json and adapter_model.safetensors as PEFT saves them (float32, B random rather
    than PEFT's zeros so that every path carries signal) and reference.safetensors with, computed in
    float64: loss F64 (1), logits F64 (N, V) and grad/KEY for every adapter tensor by its key in
    adapter_model.safetensors (the base model frozen, as PEFT trains it)."""
    if name not in LORA:
        return
    import peft
    a = os.path.join(d, "lora")
    torch.manual_seed(4321)
    base = model_cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    pm = peft.get_peft_model(base, peft.LoraConfig(lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", **LORA[name]))
    with torch.no_grad():
        for pname, p in pm.named_parameters():
            if "lora_" in pname:
                p.normal_(0.0, 0.15)
    pm.save_pretrained(a)
    if os.path.exists(os.path.join(a, "README.md")):  # PEFT's empty model card
        os.remove(os.path.join(a, "README.md"))
    ref = peft.PeftModel.from_pretrained(load_f64(model_cls, d), a).to(torch.float64)
    ref.train(False)
    for pname, p in ref.named_parameters():
        p.requires_grad_("lora_" in pname)
    logits = ref(input_ids=ids, use_cache=False).logits[0].to(torch.float64)
    loss = F.cross_entropy(logits[:-1], ids[0, 1:])
    loss.backward()
    tensors = {"loss": loss.detach().reshape(1).contiguous(), "logits": logits.detach().contiguous()}
    for pname, p in ref.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.dtype == torch.float64, f"{name}: {pname}"
            tensors["grad/" + pname.replace(".default", "")] = p.grad.detach().contiguous()
    save_file(tensors, os.path.join(a, "reference.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                        "peft": peft.__version__})
    print(f"{name}: LoRA adapter ({len(tensors) - 2} tensors), loss {loss.item():.6f} -> {a}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  "tests", "fixtures", "hf"))
    a = ap.parse_args()
    failed = []
    for name in MODELS:  # (one family's failure, e.g. a transformers without it, leaves the others made)
        try:
            make(name, a.out)
        except Exception as e:  # noqa: BLE001
            print(f"{name}: NOT MADE: {type(e).__name__}: {e}")
            failed.append(name)
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write("Made by `python3 tools/golden_hf.py` with transformers " + transformers.__version__ +
                " and torch " + torch.__version__ + "; see that script for the layout.\n")
    # fail the step (and so the GPU session's summary) if a float64 fixture is missing
    missing = [n for n in MODELS if not os.path.exists(os.path.join(a.out, n, "reference.safetensors"))]
    assert not missing, f"fixtures not made: {missing} (failed: {failed})"


if __name__ == "__main__":
    main()
