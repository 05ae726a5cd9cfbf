#!/usr/bin/env bash
# Installs the Debian packages oomb needs, only those missing. Safe to run repeatedly.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config
      libopenblas-openmp-dev libomp-dev nlohmann-json3-dev libfmt-dev libcli11-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      clang libclang-rt-14-dev
      python3 python3-torch python3-numpy python3-matplotlib)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "install-deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
