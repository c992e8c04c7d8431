// Device helpers for the CUPTI GPU tests (gpu_work.cu).
#pragma once
#include <cuda_runtime_api.h>

namespace memcomm::test {
// Launches one kernel (named memcomm_spin_kernel) that busy-waits `ns` GPU nanoseconds, then sets *done.
cudaError_t launch_spin(cudaStream_t stream, unsigned long long ns, int* done);
}  // namespace memcomm::test
