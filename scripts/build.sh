#!/usr/bin/env bash
# Configures and builds memcomm in Release into build/ (or $MEMCOMM_BUILD_DIR).
# Extra arguments go to the configure step. A build directory that exists is configured again only
# when there are arguments, so that e.g. scripts/test.sh's -DMEMCOMM_SANITIZE=... always takes effect
# even on a directory an earlier run configured otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
BUILD=${MEMCOMM_BUILD_DIR:-build}
# The venv's ninja (scripts/setup.sh) schedules by critical path; Debian's is the fallback.
ninja_args=()
if [ -x .venv/bin/ninja ]; then ninja_args=(-DCMAKE_MAKE_PROGRAM="$PWD/.venv/bin/ninja"); fi
if [ ! -f "$BUILD/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMCOMM_WERROR=ON "${ninja_args[@]}" "$@"
fi
# MEMCOMM_BUILD_TARGETS limits the build to some targets (the TSan stage of scripts/test.sh).
# shellcheck disable=SC2086
cmake --build "$BUILD" -j"$(nproc)" ${MEMCOMM_BUILD_TARGETS:+--target $MEMCOMM_BUILD_TARGETS}

# The Python package (python/): make `.venv/bin/python -c "import memcomm"` find this build's copy,
# through a .pth file in the project's virtualenv (only for the default build/, which has LibTorch).
# (scripts/demo.sh builds memcomm-train only: without the extension there is nothing to point at yet.)
if [ "$BUILD" = build ] && compgen -G "$BUILD/python/memcomm/_memcomm*.so" >/dev/null && [ -x .venv/bin/python ]; then
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$PWD/$BUILD/python" > "$site/memcomm-build.pth"
fi
