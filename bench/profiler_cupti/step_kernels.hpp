#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace memcomm::bench {
// `kernels` axpy launches over n floats, then a device-to-host copy of copy_bytes, then a stream sync.
cudaError_t run_step(cudaStream_t s, float* x, float* y, int n, int kernels, float* host, size_t copy_bytes);
}  // namespace memcomm::bench
