#!/usr/bin/python3
"""Renders chat templates the way Hugging Face transformers does (Python's Jinja, immutable sandbox,
trim_blocks, lstrip_blocks, loop controls, tojson as json.dumps(ensure_ascii=False), raise_exception,
strftime_now, {% generation %} spans): the reference for oomb's Jinja subset (tests/test_jinja.cpp).

usage: jinja_render.py CASES.json OUT.json
CASES: [{"template": str, "variables": {...}}, ...]; OUT: [{"text": str, "generation": [[b, e], ...]} or
{"error": str}, ...], offsets in UTF-8 bytes. No transformers needed: only Debian's python3-jinja2."""
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

OPEN, CLOSE = "\x02", "\x03"  # marks around a generation block's output, taken out after rendering


class Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_mark"), [], [], body).set_lineno(lineno)

    def _mark(self, caller):
        return OPEN + caller() + CLOSE


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def render(template, variables):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    marked = env.from_string(template).render(**variables)
    text, spans, start = "", [], None
    for ch in marked:
        if ch == OPEN:
            start = len(text.encode())
        elif ch == CLOSE:
            spans.append([start, len(text.encode())])
        else:
            text += ch
    return {"text": text, "generation": spans}


def main():
    cases = json.load(open(sys.argv[1], encoding="utf-8"))
    out = []
    for c in cases:
        try:
            out.append(render(c["template"], c["variables"]))
        except Exception as e:  # noqa: BLE001 - any failure is the answer for this case
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)


if __name__ == "__main__":
    main()
