#!/usr/bin/env python3
"""Checks that the commands the README and docs/ show work as written: every flag of an `oomb SUB ...`
command line in README.md, docs/ARCHITECTURE.md and docs/BENCHMARKS.md is one `oomb SUB --help` lists,
and every other --flag the README mentions is one of some oomb subcommand (or of another program it
names: OTHER_PROGRAMS). A flag renamed in the CLI but left in the docs is what this catches.

    docs_flags_check.py SOURCE_DIR BUILD_DIR               (exit 0: ok, 1: a finding)
    docs_flags_check.py --self-test SOURCE_DIR BUILD_DIR   (a flag broken in a copy of each: each reported)
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_session_check import flags_of, help_options  # noqa: E402

DOCS = ("README.md", "docs/ARCHITECTURE.md", "docs/BENCHMARKS.md")
# flags the README gives to other programs: mpirun's, tensorboard's, gpu_session.sh's benchmark
# (bench/cuda_step.py), and `--lora-*` (the LoRA flags as a family)
OTHER_PROGRAMS = {"--bind-to", "--map-by", "--logdir", "--models", "--lora-"}


def subcommands(oomb):
    out = subprocess.run([oomb, "--help"], capture_output=True, text=True).stdout
    return re.findall(r"^  (\w+)\s", out.split("Subcommands:")[-1], re.M)


def command_texts(text):
    """(line number, text) of each place a command is written: a fenced block's logical lines (a
    backslash continuation joined, a shell comment cut) and each backquoted span outside the fences
    (which may wrap lines within a paragraph). Prose outside both is not read as a command."""
    out, paragraph, fenced = [], [], False

    def spans():  # the backquoted spans of the paragraph so far
        body = "".join(line for _, line in paragraph)
        for m in re.finditer(r"`([^`]+)`", body):
            out.append((paragraph[0][0] + body.count("\n", 0, m.start()), m.group(1).replace("\n", " ")))
        paragraph.clear()

    lines = text.splitlines(keepends=True)
    n = 0
    while n < len(lines):
        line = lines[n]
        if line.lstrip().startswith("```"):
            spans()
            fenced = not fenced
        elif fenced:
            first, joined = n + 1, line.rstrip("\n")
            while joined.endswith("\\") and n + 1 < len(lines):
                n += 1
                joined = joined[:-1] + " " + lines[n].rstrip("\n")
            out.append((first, re.sub(r"(^|\s)#.*", "", joined)))
        elif not line.strip():  # a paragraph's end: no span crosses it
            spans()
        else:
            paragraph.append((n + 1, line))
        n += 1
    spans()
    return out


def check(texts, oomb):
    subs = subcommands(oomb)
    opts = {s: help_options(oomb, s) for s in subs}
    union = help_options(oomb).union(*opts.values())  # (the top level's: --version)
    findings, commands = [], 0
    if not subs:
        return [f"{oomb} --help lists no subcommands"], 0
    for path, text in texts.items():
        for n, line in command_texts(text):
            # a command: oomb SUB and what follows it, up to a separator or the next oomb
            for m in re.finditer(r"\boomb (\w+)([^|;&]*?)(?=\boomb |[|;&]|$)", line):
                if m.group(1) not in opts:
                    continue
                commands += 1
                for f in flags_of(m.group(2)):
                    if f not in opts[m.group(1)]:
                        findings.append(f"{path}:{n}: oomb {m.group(1)} {f}: not in `oomb {m.group(1)} --help`")
        if path == "README.md":  # every flag it names, command or not
            for f in sorted(set(flags_of(text)) - union - OTHER_PROGRAMS):
                findings.append(f"README.md: {f}: no oomb subcommand takes it (nor the programs OTHER_PROGRAMS names)")
    return findings, commands


def read_docs(src):
    return {p: open(os.path.join(src, p), encoding="utf-8").read() for p in DOCS}


def self_test(src, oomb):
    texts = read_docs(src)
    if check(texts, oomb)[0]:
        print("self-test: the docs as they are have findings; fix those first")
        return 1
    mutants = {  # (file, old, new, a word the finding must contain; None: no finding may come)
        # another subcommand's flag: only the per-command check can tell
        "README command": ("README.md", "oomb init --preset tiny --arch qwen2", "oomb init --passkey --preset tiny --arch qwen2",
                           "oomb init --passkey"),
        "README continuation line": ("README.md", "--device cpu --metrics run.jsonl", "--device cpu --passkey --metrics run.jsonl",
                                     "oomb train --passkey"),
        "README prose": ("README.md", "`--sparse-pages", "`--sparse-page", "--sparse-page:"),
        "ARCHITECTURE command": ("docs/ARCHITECTURE.md", "oomb plan --", "oomb plan --bogus-flag --", "--bogus-flag"),
        "BENCHMARKS wrapped span": ("docs/BENCHMARKS.md", "--chunk-size\n256 --steps 4`", "--chunk-size\n256 --bogus 4`",
                                    "oomb train --bogus"),
        "prose is not a command": ("docs/BENCHMARKS.md", "\n\nMeasured: `oomb train --device sim --offload params",
                                   "\n\nas oomb plan says, torchrun --nproc-per-node 8 saw.\n\nMeasured: `oomb train "
                                   "--device sim --offload params", None),
    }
    bad = 0
    for what, (path, old, new, word) in mutants.items():
        t = dict(texts)
        if old not in t[path]:
            print(f"self-test: {what}: '{old}' not in {path}")
            bad += 1
            continue
        t[path] = t[path].replace(old, new, 1)
        got = check(t, oomb)[0]
        if word is None:
            print(f"self-test: {what}: {'NOT quiet: ' + str(got) if got else 'no finding'}")
            bad += 1 if got else 0
        elif any(word in f for f in got):
            print(f"self-test: {what}: reported")
        else:
            print(f"self-test: {what}: NOT reported: {got}")
            bad += 1
    return 1 if bad else 0


def main(argv):
    test = argv[:1] == ["--self-test"]
    argv = argv[1:] if test else argv
    if len(argv) != 2:
        print(__doc__)
        return 2
    src, oomb = argv[0], os.path.join(argv[1], "oomb")
    if not os.access(oomb, os.X_OK):
        print(f"FINDING: no program {oomb}: build the oomb target first")
        return 1
    if test:
        return self_test(src, oomb)
    findings, commands = check(read_docs(src), oomb)
    for f in findings:
        print("FINDING:", f)
    print(f"{commands} oomb command lines in {', '.join(DOCS)} checked, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
