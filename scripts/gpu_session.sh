#!/usr/bin/env bash
# Every check and benchmark that needs a GPU, in one run on the device machine, from the repository
# root, with gpu-bundle/ carried (scripts/gpu_bundle.sh makes it here). Two files come back in
# $OUT (the device tool returns at most 8): summary.txt and results.tgz (every log, the Hugging
# Face fixtures for tests/fixtures/hf, the benchmark's table).
#   bash scripts/gpu_session.sh [--quick]      (--quick: tests and fixtures only, no benchmark)
set -uo pipefail
OUT=${OUT:-$PWD/out/gpu}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/oomb-gpu.XXXXXX)  # logs and scratch; packed into $OUT at the end
B=$PWD/gpu-bundle
export OOMB_SOURCE_DIR=$PWD OOMB_BINARY_DIR=$W/bin
mkdir -p "$OOMB_BINARY_DIR" && cp "$B/oomb" "$OOMB_BINARY_DIR/"
finish() {
  tar czf "$OUT/results.tgz" -C "$W" --exclude=bin --exclude=bench-work . 2>/dev/null
}
trap finish EXIT
cublas=$(python3 -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${cublas:-}:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$W/gpu.txt" 2>&1
step() {  # name, command...: log to $OUT/name.log, print its end
  local name=$1; shift
  echo "== $name: $*"
  "$@" > "$W/$name.log" 2>&1
  local rc=$?
  echo "rc=$rc" >> "$W/$name.log"
  { echo "== $name (rc=$rc)"; grep -E "^\[ (parity|cuda|hf) |PASSED|FAILED|Failure|rel. error|\| " "$W/$name.log" | tail -60; } |
    tee -a "$OUT/summary.txt"
}
step gemm_layout "$B/test_gemm_layout"
step cuda_device "$B/test_cuda_device"
step cuda_ops "$B/test_cuda_ops"
step cuda_model "$B/test_cuda_model"
step golden_hf python3 tools/golden_hf.py --out "$W/hf"
mkdir -p tests/fixtures && cp -r "$W/hf" tests/fixtures/ 2>/dev/null
step hf_golden "$B/test_hf_golden"
[ "${1:-}" = "--quick" ] && exit 0
step attention_lab_d64 "$B/oomb_attention_lab" --heads 14 --kv-heads 2 --dim 64 --chunk 4096 --keys 32768
step attention_lab_d128 "$B/oomb_attention_lab" --heads 28 --kv-heads 4 --dim 128 --chunk 4096 --keys 32768
step bench python3 bench/cuda_step.py --oomb "$B/oomb" --budget 900 --per-run 240 --out "$W/bench-work"
