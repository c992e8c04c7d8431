#!/usr/bin/env bash
# Sets up what is missing, builds everything, and runs the whole test suite:
#   1. the Release build (build/): every ctest test, GUI tests under a virtual X server;
#   2. the unit tests under ASan+UBSan (build-asan-fuzz/: clang, no LibTorch), and a TSan build of
#      the multithreaded ones (build-tsan/: recorder, live stream, allocator);
#   3. a short libFuzzer run of every fuzz target, one per core at a time (build-asan-fuzz/ again:
#      one clang ASan+UBSan tree builds the libraries once for the unit tests and the fuzz targets).
# The sanitizer and fuzz builds use the Check build type, -O1 -g1 (Note [Checked builds] in
# cmake/MemcommWarnings.cmake).
# Exits non-zero on any failure. MEMCOMM_FUZZ_SECONDS (default 10) sets each fuzz run's length;
# MEMCOMM_SKIP_SANITIZERS=1 / MEMCOMM_SKIP_FUZZ=1 skip stages 2 / 3 for a quick local loop (stage 2
# builds the fuzz targets too: they are a few files in the same tree).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
start=$(date +%s)
stage() { echo; echo "=== $* ($(( $(date +%s) - start )) s)"; }

stage "setup"
scripts/setup.sh

stage "build (Release, -Werror)"
scripts/build.sh

stage "tests"
# xvfb-run gives the gui-labelled tests a display (Mesa llvmpipe, GL 4.5 core). -noreset: an X server
# resets when its last client leaves, and a GUI test connecting just then (ctest -j2) can find its
# connection closed, which Xlib's next write turns into SIGPIPE (a viewer_gui test died so at 0.02 s).
xvfb-run -a -s "-screen 0 1920x1080x24 -noreset" \
  ctest --test-dir build --output-on-failure --timeout 600 -j2

# One clang ASan+UBSan tree for the unit tests and the fuzz targets (Note [Checked builds]).
check_args=(-DCMAKE_BUILD_TYPE=Check -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
  -DMEMCOMM_SANITIZE=address,undefined -DMEMCOMM_FUZZ=ON -DMEMCOMM_WITH_TORCH=OFF -DMEMCOMM_WITH_VIEWER=OFF
  -DMEMCOMM_WITH_CUDA=OFF -DMEMCOMM_WITH_BENCH=OFF)

if [ "${MEMCOMM_SKIP_SANITIZERS:-0}" != 1 ]; then
  stage "ASan+UBSan build (unit tests and fuzz targets) and unit tests"
  MEMCOMM_BUILD_DIR=build-asan-fuzz scripts/build.sh "${check_args[@]}" -DMEMCOMM_WITH_TESTS=ON
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan-fuzz --output-on-failure --timeout 600 -j2 -L unit

  stage "TSan: recorder, live stream and allocator threads"
  export MEMCOMM_BUILD_TARGETS="profiler_recorder_test profiler_stream_test allocator_unit"
  # Without unity batches (Note [Unity builds]): each file of these libraries compiles on its own.
  MEMCOMM_BUILD_DIR=build-tsan scripts/build.sh -DCMAKE_BUILD_TYPE=Check -DMEMCOMM_SANITIZE=thread \
    -DMEMCOMM_WITH_TORCH=OFF -DMEMCOMM_WITH_VIEWER=OFF -DMEMCOMM_WITH_CUDA=OFF -DMEMCOMM_WITH_BENCH=OFF \
    -DMEMCOMM_UNITY_BUILD=OFF
  unset MEMCOMM_BUILD_TARGETS
  TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure --timeout 600 -j2 \
    -R "profiler_recorder_test|profiler_stream_test|allocator_unit"
fi

if [ "${MEMCOMM_SKIP_FUZZ:-0}" != 1 ]; then
  stage "fuzz"
  if [ "${MEMCOMM_SKIP_SANITIZERS:-0}" = 1 ]; then
    # Stage 2 did not build the tree: build it without the tests (the libraries' flags are the same).
    MEMCOMM_BUILD_DIR=build-asan-fuzz scripts/build.sh "${check_args[@]}" -DMEMCOMM_WITH_TESTS=OFF
  fi
  scripts/fuzz.sh build-asan-fuzz "${MEMCOMM_FUZZ_SECONDS:-10}"
fi

stage "all passed"
