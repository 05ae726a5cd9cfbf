#!/usr/bin/env bash
# A rehearsal of scripts/gpu_session.sh on this machine, no GPU needed: its timeline, largest and
# bench phases run as a device call runs them, on tiny shapes, with the bundle's oomb replaced by
# simt_oomb (the CUDA backend's own code on the CPU, tests/simt) and nvidia-smi by a stand-in. A
# device session is short and scarce; this finds what would break the script's plumbing there (the
# phases' flags, each step's log and summary lines, the timeline's and the benchmark's parsing of
# oomb's --metrics, results.tgz) before a GPU's minutes go on it. It measures nothing.
#
#   bash scripts/gpu_rehearsal.sh [BUILD_DIR]      (default: build; needs BUILD_DIR/simt_oomb)
#
# Runs in a temporary copy of scripts/ and bench/ (the session writes beside them); exit 0 when
# every step ran (rc=0) and every check below holds, 1 naming each failed check. ~35 s.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd) || exit 2
[ -x "$BUILD/simt_oomb" ] || { echo "gpu_rehearsal: no $BUILD/simt_oomb (build it: ninja simt_oomb)" >&2; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/oomb-rehearsal.XXXXXX") && [ -d "$T" ] ||
  { echo "gpu_rehearsal: cannot make a temporary directory under ${TMPDIR:-/tmp}" >&2; exit 2; }
trap 'rm -rf "$T"' EXIT
R=$T/tree
mkdir -p "$R/gpu-bundle" "$T/bin" "$T/tmp"
cp -r "$SRC/scripts" "$SRC/bench" "$R/"
ln -s "$BUILD/simt_oomb" "$R/gpu-bundle/oomb"
echo rehearsal > "$R/gpu-bundle/COMMIT"
# nvidia-smi's answers to the queries gpu_session.sh and bench/cuda_step.py make (an 80 GiB GPU)
cat > "$T/bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
  *memory.free*) echo 81000 ;;
  *name,memory.total*) echo "simt rehearsal (no GPU), 81559" ;;
  *) echo "simt rehearsal (no GPU), none, 81559 MiB" ;;
esac
EOF
chmod +x "$T/bin/nvidia-smi"
export PATH=$T/bin:$PATH TMPDIR=$T/tmp

# one phase: OUT=$T/out/NAME, its output in $T/NAME.log
phase() {
  local name=$1; shift
  (cd "$R" && env OUT="$T/out/$name" "$@") > "$T/$name.log" 2>&1
  echo "rc=$?" >> "$T/$name.log"
}
phase timeline GPU_SESSION_BUDGET=200 \
  GPU_SESSION_TIMELINE="tiny-qwen2 256 64 --offload params;OOMB_COPY_STREAMS=1 tiny-qwen2 256 64 --offload params --sweep chunk;tiny-qwen2 256 64 --keep-attention" \
  bash scripts/gpu_session.sh timeline
phase largest GPU_SESSION_BUDGET=120 GPU_SESSION_LARGEST="tiny-qwen2 kv,params 256 64" bash scripts/gpu_session.sh largest
# (as the header's 128K call: a profile with --keep-attention, lines by --offloads)
phase bench GPU_SESSION_BUDGET=200 GPU_SESSION_SKIP=offload GPU_SESSION_PROFILE="tiny-qwen2 256 64 --keep-attention" \
  bash scripts/gpu_session.sh bench --models tiny --lengths 256 --chunks 64 --offloads "none;params;none+keep;kv;kv,attention+keep" --no-hf

# the largest phase's own choice (pick_largest: oomb plan --json against the stand-in's 80 GiB and this
# host's memory) without training it: one line, a preset and an offload setting
(cd "$R" && W=$T/pick && mkdir -p "$W/bin" && ln -s "$BUILD/oomb" "$W/bin/oomb" &&
  source <(sed -n '/^pick_largest() {/,/^}/p' scripts/gpu_session.sh) && pick_largest) > "$T/pick.txt" 2>&1

python3 - "$T" <<'PY'
import json, os, re, sys, tarfile
t = sys.argv[1]
bad = []
def check(ok, what):
    print(("ok    " if ok else "FAILS ") + what)
    if not ok:
        bad.append(what)
def text(p):
    return open(p).read() if os.path.exists(p) else ""
for ph in ("timeline", "largest", "bench"):
    summary = text(f"{t}/out/{ph}/summary.txt")
    steps = re.findall(r"^== (\S+) \(rc=(\d+), ", summary, re.M)
    check(steps and all(rc == "0" for _, rc in steps), f"{ph}: every step ran, rc=0 ({', '.join(f'{n} rc={rc}' for n, rc in steps) or 'no steps'})")
    check("== done in" in summary, f"{ph}: the phase ran to its end")
    check(tarfile.is_tarfile(f"{t}/out/{ph}/results.tgz") if os.path.exists(f"{t}/out/{ph}/results.tgz") else False,
          f"{ph}: results.tgz packed")
s = text(f"{t}/out/timeline/summary.txt")
for label in ("tiny-qwen2 256 64 --offload params", "OOMB_COPY_STREAMS=1 tiny-qwen2 256 64 --offload params --sweep chunk",
              "tiny-qwen2 256 64 --keep-attention"):
    rows = [l for l in s.splitlines() if l.startswith(f"| {label} | step ")]
    # (each row's span and ops from --metrics' streams: none there reads as 0)
    spans = [re.search(r"\| \d+ tok/s \| span ([0-9.]+) s: compute [0-9.]+, copy .*\((\d+) ops, ", r) for r in rows]
    check(len(rows) == 3 and all(m and float(m.group(1)) > 0 and int(m.group(2)) > 0 for m in spans),
          f"timeline: 3 step rows for '{label}', each with its span and ops")
    if "params" in label:
        check(all("host update" in r for r in rows) and re.search(r"host update [0-9.]+ s on \d+ threads", rows[-1] if rows else ""),
              f"timeline: '{label}' rows give the host's update")
        check(bool(rows) and "weights" in rows[-1], f"timeline: '{label}' rows give the weights moved")
s = text(f"{t}/out/largest/summary.txt")
check("largest: tiny-qwen2 with --offload kv,params" in s, "largest: the preset and offload given are taken")
check(len(re.findall(r"^step +\d/3 \| loss ", s, re.M)) == 3, "largest: three steps trained")
pick = text(f"{t}/pick.txt").split("\n")
check(len(pick) == 2 and pick[1] == "" and re.fullmatch(r"[a-z0-9.-]+ (kv,params|params|kv|none)", pick[0]) is not None,
      f"largest: pick_largest names one preset and offload ({pick[0]!r})")
rows = [json.loads(l) for l in open(f"{t}/out/bench/bench.jsonl")] if os.path.exists(f"{t}/out/bench/bench.jsonl") else []
lines = {r["line"]: r for r in rows}
check(set(lines) == {"oomb bf16", "oomb bf16 --offload params", "oomb bf16 --keep-attention", "oomb bf16 --offload kv",
                     "oomb bf16 --offload kv,attention --keep-attention"} and all((r["tokens_per_s"] or 0) > 0 for r in rows),
      "bench: a measured row per line (" + (", ".join(f"{r['line']}: {r['tokens_per_s']}" for r in rows) or "none") + ")")
hu = (lines.get("oomb bf16 --offload params") or {}).get("host_update") or {}
check(hu.get("update_s") is not None and "host update" in lines["oomb bf16 --offload params"]["note"],
      "bench: the --offload params row notes the host's update")
check("| model | line | N | C | tokens/s |" in text(f"{t}/out/bench/bench.md"), "bench: bench.md has the table")
names = tarfile.open(f"{t}/out/bench/results.tgz").getnames() if os.path.exists(f"{t}/out/bench/results.tgz") else []
check(any(n.endswith("profile_tiny-qwen2_256_keep.json") for n in names), "bench: the op profile's JSON packed")
if bad:
    for ph in ("timeline", "largest", "bench"):
        print(f"--- {ph}.log (tail)\n" + "".join(open(f"{t}/{ph}.log").readlines()[-25:]))
    print(f"gpu_rehearsal: {len(bad)} checks failed")
    sys.exit(1)
print("gpu_rehearsal: every check held")
PY
