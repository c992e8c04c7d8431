// A GPU step made of many short kernels and a copy: the case where per-launch tracing cost shows most.
#include <cuda_runtime.h>

#include "step_kernels.hpp"

namespace memcomm::bench {
namespace {
__global__ void axpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
}  // namespace

cudaError_t run_step(cudaStream_t s, float* x, float* y, int n, int kernels, float* host, size_t copy_bytes) {
  for (int k = 0; k < kernels; ++k) axpy<<<(n + 255) / 256, 256, 0, s>>>(1.0001f, x, y, n);
  cudaError_t e = cudaMemcpyAsync(host, y, copy_bytes, cudaMemcpyDeviceToHost, s);
  if (e != cudaSuccess) return e;
  return cudaStreamSynchronize(s);
}

}  // namespace memcomm::bench
