#!/usr/bin/env bash
# Configures (once) and builds memcomm in Release into build/ (or $MEMCOMM_BUILD_DIR).
# Extra arguments go to the configure step of a new build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
BUILD=${MEMCOMM_BUILD_DIR:-build}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMCOMM_WERROR=ON "$@"
fi
# MEMCOMM_BUILD_TARGETS limits the build to some targets (the TSan stage of scripts/test.sh).
# shellcheck disable=SC2086
cmake --build "$BUILD" -j"$(nproc)" ${MEMCOMM_BUILD_TARGETS:+--target $MEMCOMM_BUILD_TARGETS}
