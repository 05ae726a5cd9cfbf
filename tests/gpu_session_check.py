#!/usr/bin/env python3
"""Checks, on the CPU, what scripts/gpu_session.sh will ask of this build on the device machine, whose
15 minutes a typo would waste: both GPU scripts parse (bash -n); every program the session runs is one
gpu_bundle.sh builds and packs; every --gtest_filter selects at least one test of its program (a filter
matching nothing passes silently); every flag given to oomb train, plan and init, dist_check, the
attention lab and the Python tools (tools/, bench/) is one they take, the usage examples' too; every
preset named exists.

    gpu_session_check.py SOURCE_DIR BUILD_DIR HAVE_CUDA   (exit 0: ok, 1: a finding; without CUDA the
        programs only a CUDA build has are named as not checked)
    gpu_session_check.py --self-test SOURCE_DIR BUILD_DIR HAVE_CUDA
        (20 kinds of mistake, each made in a copy of the scripts or the README: each reported)
"""
import os
import re
import subprocess
import sys

MUTANT_SUFFIX = "_mutant_drop_query"  # gpu_bundle.sh's negative control: test_cuda_attention, another define
CUDA_ONLY = {"oomb_attention_lab"}  # the programs a build without nvcc does not have (dev/CMakeLists.txt)
OOMB_SUBCOMMANDS = ("train", "plan", "init")


def logical_lines(text):  # backslash-newline continuations joined
    return text.replace("\\\n", " ").splitlines()


def flags_of(s):
    return re.findall(r"(?<![\w$-])(--[a-z][\w-]*)", s)


def option_flags(help_text):  # the options a CLI11 --help lists, each name of an alias pair (not its prose's)
    names = re.findall(r"^  ((?:-\w,)?--[\w-]+(?:,--[\w-]+)*)", help_text, re.M)
    return {f for n in names for f in re.findall(r"--[\w-]+", n)}


def help_options(exe, *args):  # the options of `exe [args] --help` (CLI11)
    return option_flags(subprocess.run([exe, *args, "--help"], capture_output=True, text=True).stdout)


def argparse_options(path):  # the options a Python tool's add_argument calls declare
    return set(re.findall(r"add_argument\(\s*[\"'](--[\w-]+)", open(path).read()))


def comment_text(script):  # the script's comment lines, joined (its usage examples)
    return " ".join(line.lstrip("# ") for line in script.splitlines() if line.lstrip().startswith("#"))


def shapes(session):  # GPU_SESSION_TIMELINE's default and GPU_SESSION_PROFILE's: "[NAME=VALUE...] preset N C [flags]"
    texts = [m.group(1) for m in re.finditer(r"GPU_SESSION_(?:TIMELINE|PROFILE)(?::-|=\")([^}\"]*)", session)]
    out = []
    for shape in (x for t in texts for x in t.split(";")):
        words = [w for w in shape.split() if not re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", w)]
        if len(words) >= 3 and words[1].isdigit():  # (not the usage's "preset N C [flags]")
            out.append(words)
    return out


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
        if self.have_cuda or program not in CUDA_ONLY:
            self.find(msg)
        elif program not in self.unbuilt:
            self.unbuilt.append(program)

    def program(self, name):  # the build's program of that name, or None
        for d in (self.build, os.path.join(self.build, "dev")):
            p = os.path.join(d, name)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
        return None

    def help_flags(self, prog, *sub):  # the options of `prog [sub] --help` (CLI11)
        key = (prog,) + sub
        if key not in self._help:
            exe = self.program(prog)
            if exe is None:
                self.find(f"no program {prog} in this build, so its flags cannot be checked")
            self._help[key] = help_options(exe, *sub) if exe else set()
        return self._help[key]

    def oomb_flags(self, sub):
        return self.help_flags("oomb", sub)

    def check_bundle(self, session, bundle):
        # the programs gpu_bundle.sh builds (--target ...) and packs (gpu-bundle/NAME)
        joined = bundle.replace("\\\n", " ")
        targets = {t for m in re.finditer(r"--target((?:[ \t]+\w+)+)", joined) for t in m.group(1).split()}
        copied = [w for m in re.finditer(r"for f in ([^;]+); do", joined) for w in m.group(1).split()
                  if re.fullmatch(r"[\w/]+", w)]  # (not the loop over gpu-bundle/* that collects libraries)
        packed = {os.path.basename(w) for w in copied} | set(re.findall(r"gpu-bundle/(\w+)", bundle))
        if not targets or not copied:
            self.find("gpu_bundle.sh: no --target list or no packed programs found (has its form changed?)")
        for t in sorted(targets):
            if self.program(t) is None:
                self.missing(t, f"gpu_bundle.sh builds target '{t}', which this build does not have")
        for w in copied:  # each copied from its place in the build, and built by the --target list above
            name = os.path.basename(w)
            if name not in targets:
                self.find(f"gpu_bundle.sh copies '{w}', which its --target list does not build")
            elif self.program(name) is not None and not os.path.isfile(os.path.join(self.build, w)):
                self.find(f"gpu_bundle.sh copies '{w}', but the build puts {name} at {self.program(name)}")
        used = set(re.findall(r"\$(?:W/bin|B)/([A-Za-z_]\w*)", session)) - {"lib", "COMMIT"}
        # (a loop's programs: for t in A B ...; do ... $B/$t)
        for m in re.finditer(r"for (\w+) in ([\w ]+); do(.*?)\bdone\b", session, re.S):
            if re.search(r"\$(?:W/bin|B)/\$\{?" + m.group(1) + r"\b", m.group(3)):
                used |= set(m.group(2).split())
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
        held = [" ".join(words) for words in shapes(session)]
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
        # a flag kept in a variable for train and plan (largest's flag="--offload ...")
        for m in re.finditer(r"\bflag=\"(--[\w-]+)", session):
            for sub in ("train", "plan"):
                n += 1
                if m.group(1) not in self.oomb_flags(sub):
                    self.find(f"gpu_session.sh: flag=\"{m.group(1)} ...\": not a flag of `oomb {sub} --help`")
        # the test programs' own (dist_check's CLI)
        for line in logical_lines(session):
            for m in re.finditer(r"/dist_check['\"]?", line):
                for f in flags_of(command_tail(line, m.end())):
                    n += 1
                    if f not in self.help_flags("dist_check"):
                        self.find(f"gpu_session.sh: dist_check {f}: not a flag of `dist_check --help`")
        if n == 0:
            self.find("gpu_session.sh: no oomb flags found (has its form changed?)")
        self.checked += n

    def check_presets(self, session):
        names = set()
        m = re.search(r"for p in ([\w. -]+); do", session)  # (pick_largest's list)
        if m:
            names |= set(m.group(1).split())
        names |= {words[0] for words in shapes(session)}
        names |= {p.strip("'\"") for p in re.findall(r"--preset[ \t]+(\S+)", session)}
        names = {p for p in names if "$" not in p}  # (not "$1", "$preset": those come from the lists above)
        if not names:
            self.find("gpu_session.sh: no presets found (has its form changed?)")
        exe = self.program("oomb")
        if exe is None:
            self.find("no program oomb in this build, so the presets cannot be checked")
            return
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

    def check_python(self, session, bundle):
        n = 0
        # the tools in the script, and bench/cuda_step.py's options in the usage lines of the header
        lines = logical_lines(session)
        calls = [(m.group(1), command_tail(line, m.end())) for line in lines
                 for m in re.finditer(r"python3\s+((?:tools|bench)/\w+\.py)", line)]
        calls += [("bench/cuda_step.py", m.group(1)) for line in lines
                  for m in re.finditer(r"gpu_session\.sh (?:all|bench)\b(.*)", line)]
        # the usage examples in backquotes: gpu_session.sh's header (a span opening with all or bench:
        # bench/cuda_step.py's options; with a flag: cuda_step.py's or oomb train's), gpu_bundle.sh's and the README's
        readme = self.readme.replace("\n", " ")
        step_opts = argparse_options(os.path.join(self.src, "bench", "cuda_step.py"))
        for where, text in (("gpu_session.sh", comment_text(session)), ("gpu_bundle.sh", comment_text(bundle)),
                            ("README.md", readme)):
            for m in re.finditer(r"`([^`]*)`", text):
                span = m.group(1).strip()
                first = span.split()[0] if span.split() else ""
                if re.search(r"gpu_session\.sh (?:all|bench)\b", span) or (where != "README.md" and first in ("all", "bench")):
                    known, what = step_opts, "bench/cuda_step.py's options"
                elif where == "gpu_session.sh" and first.startswith("--"):
                    known, what = step_opts | self.oomb_flags("train"), "bench/cuda_step.py's or oomb train's options"
                else:
                    continue
                for f in flags_of(span):
                    n += 1
                    if f not in known:
                        self.find(f"{where}: the usage `{span[:60]}`: {f} is not one of {what}")
        for path, tail in calls:
            full = os.path.join(self.src, path)
            if not os.path.isfile(full):
                self.find(f"gpu_session.sh runs {path}, which does not exist")
                continue
            known = argparse_options(full)
            for f in flags_of(tail):
                n += 1
                if f not in known:
                    self.find(f"gpu_session.sh: {path} {f}: not one of its add_argument options")
        if n == 0:
            self.find("gpu_session.sh: no Python tool options found (has its form changed?)")
        self.checked += n

    def run(self, session, bundle, readme=None):
        self.readme = open(os.path.join(self.src, "README.md")).read() if readme is None else readme
        for name, text in (("gpu_session.sh", session), ("gpu_bundle.sh", bundle)):
            r = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
            if r.returncode != 0:
                self.find(f"{name}: bash -n: {r.stderr.strip()}")
        self.check_bundle(session, bundle)
        self.check_filters(session)
        self.check_oomb(session)
        self.check_presets(session)
        self.check_lab(session)
        self.check_python(session, bundle)
        return self.findings


def read_scripts(src):
    return (open(os.path.join(src, "scripts", "gpu_session.sh")).read(),
            open(os.path.join(src, "scripts", "gpu_bundle.sh")).read())


def self_test(src, build, have_cuda):
    session, bundle = read_scripts(src)
    readme = open(os.path.join(src, "README.md")).read()
    clean = Checker(src, build, have_cuda).run(session, bundle)
    if clean:
        print("self-test: the scripts as they are have findings; fix those first:\n  " + "\n  ".join(clean))
        return 1

    def s(old, new):  # gpu_session.sh broken
        return session.replace(old, new, 1), bundle, readme

    def b(old, new):  # gpu_bundle.sh broken
        return session, bundle.replace(old, new, 1), readme

    mutants = {  # each broken copy, and a word its finding must contain
        "filter": (s("Bf16Budget.Cuda*", "Bf16Budget.Cdua*"), "Cdua"),
        "train flag": (s("--steps 3 --optimizer adamw", "--stesp 3 --optimizer adamw"), "--stesp"),
        "init flag": (s("--dtype bf16 --out", "--dtyp bf16 --out"), "--dtyp"),
        "plan flag": (s('--device-memory "$free"', '--device-memroy "$free"'), "--device-memroy"),
        "shape flag": (s("--sweep chunk", "--swep chunk"), "--swep"),
        "held flag": (s("--log-every 1';", "--log-evry 1';"), "--log-evry"),
        "mpi flag": (s("\\$A --sp 2", "\\$A --spp 2"), "--spp"),
        "dist_check flag": (s("--device cuda --comm mpi", "--device cuda --com mpi"), "--com"),
        "header usage flag": (s("`--chunks 4096 --offloads", "`--chunk 4096 --offloads"), "--chunk "),
        "README usage flag": ((session, bundle, readme.replace("gpu_session.sh all --models", "gpu_session.sh all --model", 1)),
                              "--model "),
        "preset": (s("qwen3-1.7b", "qwen3-1.7bb"), "qwen3-1.7bb"),
        "tool's preset": (s("--preset qwen2.5-0.5b --oomb", "--preset qwen2.5-0.5bb --oomb"), "qwen2.5-0.5bb"),
        "env shape's preset": (s("OOMB_COPY_STREAMS=1 qwen2.5-1.5b", "OOMB_COPY_STREAMS=1 qwen2.5-1.5bb"), "qwen2.5-1.5bb"),
        "program": (s("$W/bin/test_cuda_timeline", "$W/bin/test_cuda_timelines"), "timelines"),
        "memcheck loop's program": (s("for t in test_cuda_device test_cuda_ops", "for t in test_cuda_devise test_cuda_ops"),
                                    "test_cuda_devise"),
        "bundle target": (b("test_gemm_layout test_precision oomb_attention_lab", "test_gemm_layout oomb_attention_lab"),
                          "test_precision"),
        "bundle path": (b("test_precision dev/oomb_attention_lab", "test_precision oomb_attention_lab"), "oomb_attention_lab"),
        "lab flag": (s("--kv-heads 4 --dim 128", "--kv-head 4 --dim 128"), "--kv-head"),
        "tool flag": (s("--lens", "--lengths"), "offload.py --lengths"),
        "syntax": (s("esac\necho", "echo"), "bash -n"),
    }
    needs = {"bundle path": "oomb_attention_lab"}  # (its finding compares the copy with the built program's place)
    bad = 0
    for what, ((text, btext, rtext), word) in mutants.items():
        if what in needs and Checker(src, build, have_cuda).program(needs[what]) is None:
            print(f"self-test: {what}: not tried, this build has no {needs[what]}")
            continue
        if (text, btext, rtext) == (session, bundle, readme):
            print(f"self-test: the {what} mutation found nothing to change")
            bad += 1
            continue
        got = Checker(src, build, have_cuda).run(text, btext, rtext)
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
