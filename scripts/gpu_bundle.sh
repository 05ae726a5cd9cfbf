#!/usr/bin/env bash
# Builds, on this machine, what a GPU session runs on the device machine (which has CUDA and
# PyTorch but none of the Debian libraries): the CUDA test programs, oomb and the attention lab,
# stripped, with the non-system shared libraries they load, into gpu-bundle/ (git-ignored).
# Then, through the device tool, with carry ["gpu-bundle"]:  bash scripts/gpu_session.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-gpu
bash scripts/install-deps.sh
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DOOMB_FUZZ=OFF > $B.configure.log
cmake --build $B -j "$(nproc)" --target oomb test_cuda_device test_cuda_ops test_cuda_model test_hf_golden \
  test_gemm_layout oomb_attention_lab
rm -rf gpu-bundle && mkdir -p gpu-bundle/lib
for f in oomb test_cuda_device test_cuda_ops test_cuda_model test_hf_golden test_gemm_layout dev/oomb_attention_lab; do
  cp $B/$f gpu-bundle/ && strip gpu-bundle/$(basename $f)
done
for f in gpu-bundle/*; do [ -f "$f" ] && ldd "$f" | awk '{print $3}'; done | sort -u | grep "^/" |
  grep -vE "/(libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt|ld-linux[^/]*)\.so|/usr/local/cuda" |
  xargs -r -I{} cp -L {} gpu-bundle/lib/
du -sh gpu-bundle
