// Device work for the CUPTI GPU tests, behind a plain C++ interface (the Catch2 code stays host C++).
#include <cuda_runtime.h>

#include "gpu_work.hpp"

namespace memcomm::test {
namespace {

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins for `ns` of GPU time so the kernel's end is known to lie after the host's next timestamp.
__global__ void memcomm_spin_kernel(unsigned long long ns, int* done) {
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) *done = 1;
}

}  // namespace

cudaError_t launch_spin(cudaStream_t stream, unsigned long long ns, int* done) {
  memcomm_spin_kernel<<<1, 32, 0, stream>>>(ns, done);
  return cudaGetLastError();
}

}  // namespace memcomm::test
