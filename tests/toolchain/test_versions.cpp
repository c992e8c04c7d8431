// CUPTI, NVTX and NCCL link and answer version queries on a machine without a GPU.
#include "memcomm_test.hpp"

#include <cuda_runtime.h>
#include <cupti.h>
#include <nccl.h>
#include <nvtx3/nvToolsExt.h>

TEST_CASE("NCCL reports its version without a GPU") {
  int v = 0;
  REQUIRE(ncclGetVersion(&v) == ncclSuccess);
  CHECK(v >= 22800);  // NCCL 2.28: version code is major*10000 + minor*100 + patch
}

TEST_CASE("CUPTI reports its API version") {
  uint32_t v = 0;
  REQUIRE(cuptiGetVersion(&v) == CUPTI_SUCCESS);
  CHECK(v >= CUPTI_API_VERSION - 10);
  CHECK(v > 0);
}

TEST_CASE("CUPTI activity capture without a GPU fails with an error, not a crash") {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) {
    SUCCEED("a GPU is present; this case checks the no-GPU path only");
    return;
  }
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS);
}

TEST_CASE("NVTX ranges are harmless without a tool attached") {
  nvtxRangePushA("memcomm-test");
  const int depth = nvtxRangePop();
  CHECK(depth < 1);  // negative (no tool tracks ranges) or 0: the calls do nothing
}
