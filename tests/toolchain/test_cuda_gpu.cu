// Needs a GPU (label gpu): a real kernel launch and copy back. Skipped where there is none.
#include "memcomm_test.hpp"

#include <cuda_runtime.h>

#include <vector>

__global__ void iota_kernel(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 3;
}

TEST_CASE("a kernel runs on the GPU and its result copies back") {
  int n_gpus = 0;
  if (cudaGetDeviceCount(&n_gpus) != cudaSuccess || n_gpus == 0) MEMCOMM_SKIP_TEST("no GPU on this machine");
  constexpr int n = 1000;
  int* d = nullptr;
  REQUIRE(cudaMalloc(&d, n * sizeof(int)) == cudaSuccess);
  iota_kernel<<<(n + 255) / 256, 256>>>(d, n);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<int> h(n);
  REQUIRE(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(d);
  for (int i = 0; i < n; ++i) REQUIRE(h[i] == i * 3);
}
