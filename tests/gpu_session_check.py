#!/usr/bin/env python3
"""Checks, on the CPU, what scripts/gpu_session.sh will ask of this build on the device machine, whose
15 minutes a typo would waste: both GPU scripts parse (bash -n); every program the session runs is one
gpu_bundle.sh builds and packs; every --gtest_filter selects at least one test of its program (a filter
matching nothing passes silently); every flag given to oomb train, plan and init, to the attention lab
and to the Python tools (tools/, bench/) is one they take; every preset named exists.

    gpu_session_check.py SOURCE_DIR BUILD_DIR HAVE_CUDA   (exit 0: ok, 1: a finding; without CUDA the
        programs only a CUDA build has are named as not checked)
    gpu_session_check.py --self-test SOURCE_DIR BUILD_DIR HAVE_CUDA
        (a filter, a flag, a preset and a program each broken in a copy of the script: each reported)
"""
import os
import re
import subprocess
import sys

MUTANT_SUFFIX = "_mutant_drop_query"  # gpu_bundle.sh's negative control: test_cuda_attention, another define
OOMB_SUBCOMMANDS = ("train", "plan", "init")


def logical_lines(text):  # backslash-newline continuations joined
    return text.replace("\\\n", " ").splitlines()


def flags_of(s):
    return re.findall(r"(?<![\w$-])(--[a-z][\w-]*)", s)


def command_tail(line, start):  # the text of one command: up to the next &&, ||, a pipe or ;
    return re.split(r"&&|\|\||\s\|\s|;", line[start:])[0]


class Checker:
    def __init__(self, src, build, have_cuda):
        self.src, self.build, self.have_cuda = src, build, have_cuda
        self.findings, self.checked, self.unbuilt = [], 0, []
        self._help = {}

    def find(self, msg):
        self.findings.append(msg)

    def missing(self, program, msg):  # without nvcc the CUDA-only programs are not built: said, not a finding
        if self.have_cuda:
            self.find(msg)
        elif program not in self.unbuilt:
            self.unbuilt.append(program)

    def program(self, name):  # the build's program of that name, or None
        for d in (self.build, os.path.join(self.build, "dev")):
            p = os.path.join(d, name)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
        return None

    def oomb_flags(self, sub):
        if sub not in self._help:
            exe = self.program("oomb")
            out = subprocess.run([exe, sub, "--help"], capture_output=True, text=True).stdout if exe else ""
            self._help[sub] = set(flags_of(out))
        return self._help[sub]

    def check_bundle(self, session, bundle):
        # the programs gpu_bundle.sh builds (--target ...) and packs (gpu-bundle/NAME)
        targets = set()
        for m in re.finditer(r"--target((?:[ \t]+\w+)+)", bundle.replace("\\\n", " ")):
            targets |= set(m.group(1).split())
        packed = {os.path.basename(w) for m in re.finditer(r"for f in ([^;]+); do", bundle.replace("\\\n", " "))
                  for w in m.group(1).split()} | set(re.findall(r"gpu-bundle/(\w+)", bundle))
        if not targets or not packed:
            self.find("gpu_bundle.sh: no --target list or no packed programs found (has its form changed?)")
        for t in sorted(targets):
            if self.program(t) is None:
                self.missing(t, f"gpu_bundle.sh builds target '{t}', which this build does not have")
        used = set(re.findall(r"\$(?:W/bin|B)/([A-Za-z_]\w*)", session)) - {"lib", "COMMIT"}
        if not used:
            self.find("gpu_session.sh: no $W/bin/NAME or $B/NAME programs found (has its form changed?)")
        for u in sorted(used - packed):
            self.find(f"gpu_session.sh runs '{u}', which gpu_bundle.sh does not pack")
        self.checked += len(used)

    def check_filters(self, session):
        pairs = re.findall(r"\$(?:W/bin|B)/(\w+)['\"]?\s+--gtest_filter=['\"]?([^'\"\s]+)", session)
        if not pairs:
            self.find("gpu_session.sh: no --gtest_filter found (has its form changed?)")
        for prog, pattern in pairs:
            base = prog[:-len(MUTANT_SUFFIX)] if prog.endswith(MUTANT_SUFFIX) else prog
            exe = self.program(base)
            if exe is None:
                self.missing(base, f"{prog} --gtest_filter={pattern}: no program {base} in this build")
                continue
            out = subprocess.run([exe, "--gtest_list_tests", f"--gtest_filter={pattern}"], capture_output=True,
                                 text=True).stdout
            n = sum(1 for line in out.splitlines() if line.startswith("  ") and line.strip())
            if n == 0:
                self.find(f"{prog} --gtest_filter={pattern}: selects no test")
            self.checked += 1

    def check_oomb(self, session):
        n = 0
        for line in logical_lines(session):
            for m in re.finditer(r"/oomb['\"]?[ \t]+([a-z]\w*)", line):
                sub = m.group(1)
                if sub not in OOMB_SUBCOMMANDS:
                    self.find(f"gpu_session.sh runs oomb {sub}: not a subcommand this check knows ({OOMB_SUBCOMMANDS})")
                    continue
                known = self.oomb_flags(sub)
                for f in flags_of(command_tail(line, m.end())):
                    n += 1
                    if f not in known:
                        self.find(f"gpu_session.sh: oomb {sub} {f}: not a flag of `oomb {sub} --help`")
        # train's flags inside shapes (GPU_SESSION_TIMELINE's default, GPU_SESSION_PROFILE's) and in a
        # command line kept in a variable (dist_mpi_sp2's A='train ...', then oomb $A --sp 2)
        held = [m.group(1) for m in re.finditer(r"GPU_SESSION_(?:TIMELINE|PROFILE)(?::-|=\")([^}\"]*)", session)]
        held += [m.group(1) for m in re.finditer(r"\bA='train ([^']*)'", session)]
        held += [command_tail(line, m.end()) for line in logical_lines(session)
                 for m in re.finditer(r"/oomb['\"]?[ \t]+\\?\$A\b", line)]
        if not held:
            self.find("gpu_session.sh: no shapes nor A='train ...' found (has its form changed?)")
        for text in held:
            for f in flags_of(text):
                n += 1
                if f not in self.oomb_flags("train"):
                    self.find(f"gpu_session.sh: a shape's {f}: not a flag of `oomb train --help`")
        if n == 0:
            self.find("gpu_session.sh: no oomb flags found (has its form changed?)")
        self.checked += n

    def check_presets(self, session):
        names = set()
        m = re.search(r"for p in ([\w. -]+); do", session)  # (pick_largest's list)
        if m:
            names |= set(m.group(1).split())
        names |= set(re.findall(r"(?:GPU_SESSION_(?:TIMELINE|PROFILE)[^\n]*?|;|\")((?:qwen|llama)[\w.-]+)\s+\d", session))
        if not names:
            self.find("gpu_session.sh: no presets found (has its form changed?)")
        exe = self.program("oomb")
        for p in sorted(names):
            r = subprocess.run([exe, "plan", "--preset", p, "--seq-len", "8192", "--chunk-size", "4096"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                self.find(f"gpu_session.sh: preset '{p}': oomb plan says {(r.stderr or r.stdout).strip()[:200]}")
            self.checked += 1

    def check_lab(self, session):
        lab_src = open(os.path.join(self.src, "dev", "attention_lab.cpp")).read()
        n = 0
        for line in logical_lines(session):
            for m in re.finditer(r"oomb_attention_lab['\"]?", line):
                for f in flags_of(command_tail(line, m.end())):
                    n += 1
                    if f'"{f}"' not in lab_src:
                        self.find(f"gpu_session.sh: oomb_attention_lab {f}: dev/attention_lab.cpp takes no such flag")
        if n == 0:
            self.find("gpu_session.sh: no attention lab flags found (has its form changed?)")
        self.checked += n

    def check_python(self, session):
        n = 0
        # the tools in the script, and bench/cuda_step.py's options in the usage lines of the header
        lines = logical_lines(session)
        calls = [(m.group(1), command_tail(line, m.end())) for line in lines
                 for m in re.finditer(r"python3\s+((?:tools|bench)/\w+\.py)", line)]
        calls += [("bench/cuda_step.py", m.group(1)) for line in lines
                  for m in re.finditer(r"gpu_session\.sh (?:all|bench)\b(.*)", line)]
        for path, tail in calls:
            full = os.path.join(self.src, path)
            if not os.path.isfile(full):
                self.find(f"gpu_session.sh runs {path}, which does not exist")
                continue
            known = set(re.findall(r"add_argument\(\s*[\"'](--[\w-]+)", open(full).read()))
            for f in flags_of(tail):
                n += 1
                if f not in known:
                    self.find(f"gpu_session.sh: {path} {f}: not one of its add_argument options")
        if n == 0:
            self.find("gpu_session.sh: no Python tool options found (has its form changed?)")
        self.checked += n

    def run(self, session, bundle):
        for name, text in (("gpu_session.sh", session), ("gpu_bundle.sh", bundle)):
            r = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
            if r.returncode != 0:
                self.find(f"{name}: bash -n: {r.stderr.strip()}")
        self.check_bundle(session, bundle)
        self.check_filters(session)
        self.check_oomb(session)
        self.check_presets(session)
        self.check_lab(session)
        self.check_python(session)
        return self.findings


def read_scripts(src):
    return (open(os.path.join(src, "scripts", "gpu_session.sh")).read(),
            open(os.path.join(src, "scripts", "gpu_bundle.sh")).read())


def self_test(src, build, have_cuda):
    session, bundle = read_scripts(src)
    clean = Checker(src, build, have_cuda).run(session, bundle)
    if clean:
        print("self-test: the scripts as they are have findings; fix those first:\n  " + "\n  ".join(clean))
        return 1
    mutants = {  # each broken copy, and a word its finding must contain
        "filter": (session.replace("Bf16Budget.Cuda*", "Bf16Budget.Cdua*", 1), "Cdua"),
        "train flag": (session.replace("--steps 3 --optimizer adamw", "--stesp 3 --optimizer adamw", 1), "--stesp"),
        "shape flag": (session.replace("--sweep chunk", "--swep chunk", 1), "--swep"),
        "held flag": (session.replace("--log-every 1';", "--log-evry 1';", 1), "--log-evry"),
        "mpi flag": (session.replace("\\$A --sp 2", "\\$A --spp 2", 1), "--spp"),
        "preset": (session.replace("qwen3-1.7b", "qwen3-1.7bb", 1), "qwen3-1.7bb"),
        "program": (session.replace("$W/bin/test_cuda_timeline", "$W/bin/test_cuda_timelines", 1), "timelines"),
        "lab flag": (session.replace("--kv-heads 4 --dim 128", "--kv-head 4 --dim 128", 1), "--kv-head"),
        "tool flag": (session.replace("--lens", "--lengths", 1), "offload.py --lengths"),
        "syntax": (session.replace("esac\necho", "echo", 1), "bash -n"),
    }
    bad = 0
    for what, (text, word) in mutants.items():
        if text == session:
            print(f"self-test: the {what} mutation found nothing to change in gpu_session.sh")
            bad += 1
            continue
        got = Checker(src, build, have_cuda).run(text, bundle)
        if not any(word in f for f in got):
            print(f"self-test: the {what} mutation ('{word}') was not reported: {got}")
            bad += 1
        else:
            print(f"self-test: {what}: reported")
    return 1 if bad else 0


def main(argv):
    test = argv[:1] == ["--self-test"]
    if test:
        argv = argv[1:]
    if len(argv) != 3:
        print(__doc__)
        return 2
    src, build, have_cuda = argv[0], argv[1], argv[2].upper() in ("1", "ON", "TRUE", "YES")
    if test:
        return self_test(src, build, have_cuda)
    c = Checker(src, build, have_cuda)
    findings = c.run(*read_scripts(src))
    for f in findings:
        print("FINDING:", f)
    if c.unbuilt:
        print("not checked, not built here (this build has no CUDA):", " ".join(c.unbuilt))
    print(f"{c.checked} programs, filters, flags and presets checked, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
