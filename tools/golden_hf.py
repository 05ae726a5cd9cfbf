#!/usr/bin/env python3
"""Hugging Face golden fixtures: tiny random-init Llama and Qwen2 models built with transformers'
own modelling code, saved in Hugging Face format with their loss, logits and every gradient, so
that tests/test_hf_golden.cpp checks oomb against Hugging Face in every CI run (on the CPU).

Needs PyTorch, transformers and safetensors (the GPU machine has all three; Debian has no
transformers). Everything is computed on the CPU in float64 from the float32 weights that are
saved, so the fixtures do not depend on the GPU:

    python3 tools/golden_hf.py [--out tests/fixtures/hf]

For each model, DIR = OUT/<name>/ holds config.json, model.safetensors (float32, as saved by
save_pretrained) and reference.safetensors:
    input_ids  I64 (N)        the sequence; the loss predicts ids[1:] from ids[:-1] (labels = ids)
    loss       F64 (1)        mean cross-entropy over the N - 1 targets
    logits     F64 (N, V)
    grad/NAME  F64 (shape)    d loss / d parameter, for every parameter by its Hugging Face name
"""
import argparse
import json
import os

import torch
import transformers
from safetensors.torch import save_file

MODELS = {
    # untied embeddings, no biases, grouped-query attention (4 query heads over 2 kv heads)
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
              dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
                   rms_norm_eps=1e-5, tie_word_embeddings=False, rope_theta=10000.0)),
    # tied embeddings, q/k/v biases (Qwen2's), one kv head
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
              dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=256,
                   rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1000000.0)),
}
N = 40


def make(name, out):
    config_cls, model_cls, kw = MODELS[name]
    torch.manual_seed(1234)
    config = config_cls(**kw)
    model = model_cls(config).to(torch.float32)
    with torch.no_grad():  # larger than the default init, so that every path carries signal
        for p in model.parameters():
            p.normal_(0.0, 0.15) if p.dim() > 1 else p.normal_(1.0 if p.abs().max() == 1 else 0.0, 0.1)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    # the reference: the saved float32 weights, computed in float64, eager attention
    ref = model_cls.from_pretrained(d, torch_dtype=torch.float64, attn_implementation="eager")
    ref.train(False)
    g = torch.Generator().manual_seed(99)
    ids = torch.randint(0, config.vocab_size, (1, N), generator=g)
    outp = ref(input_ids=ids, labels=ids)
    outp.loss.backward()
    tensors = {"input_ids": ids[0].to(torch.int64).contiguous(),
               "loss": outp.loss.detach().reshape(1).contiguous(),
               "logits": outp.logits[0].detach().contiguous()}
    for pname, p in ref.named_parameters():
        tensors["grad/" + pname] = p.grad.detach().contiguous()
    save_file(tensors, os.path.join(d, "reference.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    print(f"{name}: loss {outp.loss.item():.6f}, {len(tensors) - 3} gradients -> {d}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  "tests", "fixtures", "hf"))
    a = ap.parse_args()
    for name in MODELS:
        make(name, a.out)
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write("Made by `python3 tools/golden_hf.py` with transformers " + transformers.__version__ +
                " and torch " + torch.__version__ + "; see that script for the layout.\n")


if __name__ == "__main__":
    main()
