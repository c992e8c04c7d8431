#!/usr/bin/env bash
# Installs what memcomm needs and is missing: Debian packages and LibTorch (torch==2.11.0 from PyPI,
# the CUDA 13.0 build) into a git-ignored virtualenv at .venv. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang libclang-rt-14-dev
  libimgui-dev libglfw3-dev libstb-dev libgl-dev xvfb xauth mesa-utils
  catch2 libbenchmark-dev libcli11-dev nlohmann-json3-dev libfmt-dev libzstd-dev liblz4-dev libxxhash-dev
  libsimdjson-dev zlib1g-dev
  libgloo-dev iproute2 procps dataset-fashion-mnist python3-venv python3-dev
)
TORCH_VERSION=2.11.0

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA toolkit is optional for the core, the viewer and the CPU trainer; it is used when present.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: note: /usr/local/cuda/bin is not on PATH; add it to build the CUDA parts"
fi

PY=.venv/bin/python
if ! [ -x "$PY" ] || ! "$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION into .venv (a few GB, once)"
  python3 -m venv .venv
  "$PY" -m pip install -q --upgrade pip >/dev/null
  "$PY" -m pip install -q "torch==$TORCH_VERSION" numpy
fi
# The Python package's tests (pytest) and its `pip install .` build backend (scikit-build-core).
PY_TEST_PACKAGES=(pytest scikit-build-core)
if ! "$PY" -c "import pytest, scikit_build_core" 2>/dev/null; then
  echo "setup: installing ${PY_TEST_PACKAGES[*]} into .venv"
  "$PY" -m pip install -q "${PY_TEST_PACKAGES[@]}"
fi
echo "setup: ok (torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null))"
