#!/usr/bin/env bash
# GPU check of the CUPTI capture (issue 4): builds only the CUPTI targets, runs their tests (the gpu
# ones must PASS here, not skip), then the overhead benchmark. Run from the repository root:
#   tests/profiler_cupti/gpu_check.sh [build-dir]
set -uo pipefail
build=${1:-build-gpu-cupti}
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMCOMM_WERROR=ON -DMEMCOMM_WITH_TORCH=OFF \
      -DMEMCOMM_WITH_VIEWER=OFF -DMEMCOMM_WITH_CUDA=ON >/dev/null || exit 1
targets=(test_profiler_cupti_unit test_profiler_cupti_gpu)
if cmake --build "$build" --target help | grep -q bench_cupti_overhead; then targets+=(bench_cupti_overhead); fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" || exit 1
nvidia-smi -L || true
status=0
# --no-tests=error: a filter that matched nothing is a failure; skipped gpu tests print as "Skipped".
ctest --test-dir "$build" -R 'profiler_cupti' --output-on-failure --no-tests=error 2>&1 | tee "$build/cupti_ctest.log" || status=1
if grep -q 'profiler_cupti_gpu.*Skipped' "$build/cupti_ctest.log"; then
  echo "gpu_check: a gpu test skipped on the GPU machine (no device visible?)" >&2
  status=1
fi
bench=$(find "$build" -name bench_cupti_overhead -type f -perm -u+x | head -1)
if [[ -n "$bench" ]]; then "$bench" 10 20 200 || status=$?; fi
exit $status
