#!/usr/bin/env bash
# Installs what memcomm needs and is missing: Debian packages and LibTorch (torch==2.11.0 from PyPI,
# the CUDA 13.0 build) into a git-ignored virtualenv at .venv. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang libclang-rt-14-dev
  libimgui-dev libglfw3-dev libstb-dev libgl-dev xvfb xauth mesa-utils
  catch2 libbenchmark-dev libcli11-dev nlohmann-json3-dev libfmt-dev libzstd-dev liblz4-dev libxxhash-dev
  libsimdjson-dev zlib1g-dev libre2-dev
  libgloo-dev iproute2 procps dataset-fashion-mnist python3-venv python3-dev
)
TORCH_VERSION=2.11.0

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
apt_install() {
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

PY=.venv/bin/python
# The Python package's tests (pytest; cloudpickle, which copies a script's classes by value as joblib
# and Ray do), its `pip install .` build backend (scikit-build-core), and a
# ninja that schedules by critical path (PyPI's is 1.13; Debian 12's 1.11 starts jobs in file order,
# so the trainer's precompiled LibTorch header, the longest chain, started last: Note [Build order]
# in CMakeLists.txt).
PY_TEST_PACKAGES=(pytest cloudpickle scikit-build-core ninja)
need_torch=0
if ! [ -x "$PY" ] || ! "$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  need_torch=1
fi
need_py_tests=0
if [ "$need_torch" = 1 ] || ! "$PY" -c "import pytest, cloudpickle, scikit_build_core" 2>/dev/null || ! [ -x .venv/bin/ninja ]; then
  need_py_tests=1
fi

# python_install PACKAGE...: into .venv with uv (PyPI's fast installer, put into the venv first), or
# with pip where uv cannot be had. uv downloads and unpacks the wheels in parallel and skips compiling
# bytecode: LibTorch's few GB took 33 s against pip's 292 s on this 2-core machine (the tests
# compile what they import once: Note [Bytecode for the Python tests] in tests/python/CMakeLists.txt).
# uv reads no pip.conf, so pip's index and find-links settings from the environment are passed on.
python_install() {
  if "$PY" -m pip install -q uv && .venv/bin/uv pip install -q --python "$PY" \
      ${PIP_INDEX_URL:+--index-url "$PIP_INDEX_URL"} ${PIP_FIND_LINKS:+--find-links "$PIP_FIND_LINKS"} "$@"; then
    return 0
  fi
  echo "setup: uv could not install $*; trying pip"
  "$PY" -m pip install -q --upgrade pip && "$PY" -m pip install -q "$@"
}

# Note [Setup in parallel]
# On a fresh machine setup is two downloads of about equal length: Debian's packages and LibTorch's
# wheels (a few GB). Neither needs the other once the venv can be made, so the Python install runs in
# the background while apt installs the rest. Only the apt index and Python's own packages must come
# first. One call installs LibTorch and the test packages, so the resolver runs once.
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
fi
# Python itself first (python3-dev may bring a newer point release of the interpreter pip runs on).
if [ "$need_py_tests" = 1 ] && [[ " ${missing[*]} " == *" python3-"* ]]; then
  apt_install python3-venv python3-dev
  rest=()
  for p in "${missing[@]}"; do [[ "$p" == python3-* ]] || rest+=("$p"); done
  missing=("${rest[@]}")
fi
pip_pid=
pip_log=$(mktemp)
# If apt fails (set -e), the background install must not outlive the script.
trap 'if [ -n "$pip_pid" ]; then pkill -P "$pip_pid" 2>/dev/null || true; kill "$pip_pid" 2>/dev/null || true; fi; rm -f "$pip_log"' EXIT
if [ "$need_py_tests" = 1 ]; then
  pip_packages=("${PY_TEST_PACKAGES[@]}")
  if [ "$need_torch" = 1 ]; then
    echo "setup: installing torch==$TORCH_VERSION into .venv (a few GB, once), beside apt"
    pip_packages+=("torch==$TORCH_VERSION" numpy)
  fi
  ( [ -x "$PY" ] || python3 -m venv .venv; python_install "${pip_packages[@]}" ) >"$pip_log" 2>&1 &
  pip_pid=$!
fi
if [ ${#missing[@]} -gt 0 ]; then
  apt_install "${missing[@]}"
fi
if [ -n "$pip_pid" ] && ! wait "$pip_pid"; then
  cat "$pip_log" >&2
  echo "setup: error: could not install ${pip_packages[*]} into .venv (the installer's output is above)" >&2
  exit 1
fi
pip_pid=  # finished
# The CUDA toolkit is optional for the core, the viewer and the CPU trainer; it is used when present.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: note: /usr/local/cuda/bin is not on PATH; add it to build the CUDA parts"
fi
echo "setup: ok (torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null))"
