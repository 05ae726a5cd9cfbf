#!/usr/bin/env python3
"""Static __shared__ variables of the CUDA sources outside function templates.

simt (tests/simt) puts static __shared__ variables in a section that every block starts as garbage;
GCC ignores that section inside a function template, where such a variable would keep the last
block's values and hide a missing write. Usage: lint_static_shared.py FILE... (exit 1, naming each
declaration inside a template). --self-test checks the lint on samples of its own.
"""
import re
import sys


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def findings(text):
    """(line, enclosing header) of each static __shared__ declaration inside a template."""
    text = strip_comments(text)
    out, stack, start = [], [], 0  # stack: the headers (text before '{') of the open braces
    for i, c in enumerate(text):
        if c == "{":
            stack.append(text[start:i])
            start = i + 1
        elif c == "}":
            if stack:
                stack.pop()
            start = i + 1
        elif c == ";":
            stmt = text[start:i]
            if re.search(r"\b__shared__\b", stmt) and "extern" not in stmt:
                if any(re.search(r"\btemplate\s*<", h) for h in stack):
                    out.append((text.count("\n", 0, i) + 1, stmt.strip()))
            start = i + 1
    return out


def self_test():
    bad = "template <int N>\n__global__ void k() {\n  __shared__ float s[N];\n  s[0] = 1;\n}\n"
    nested = "template <class T>\nstruct S {\n  __device__ void f() { if (1) { __shared__ int x; } }\n};\n"
    good = ("__device__ double f() {\n  __shared__ double p[32];  // template <int> in a comment\n  return p[0];\n}\n"
            "template <int N>\n__global__ void k() {\n  extern __shared__ float dyn[];\n}\n")
    assert [l for l, _ in findings(bad)] == [3], findings(bad)
    assert [l for l, _ in findings(nested)] == [3], findings(nested)
    assert findings(good) == [], findings(good)
    print("lint_static_shared: self-test passed (2 samples flagged, 1 clean)")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    bad = 0
    for path in argv[1:]:
        with open(path, encoding="utf-8") as f:
            for line, stmt in findings(f.read()):
                print(f"{path}:{line}: static __shared__ inside a function template ({stmt}): simt cannot "
                      "garble it per block; declare it in a plain function or use dynamic shared memory")
                bad += 1
    print(f"lint_static_shared: {len(argv) - 1} files, {bad} declarations inside templates")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
