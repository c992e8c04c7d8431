// The CUDA sources on a real GPU; skipped (exit 77) where there is none.
#include <cuda_runtime_api.h>

#include <vector>

#include "allocator_test_util.hpp"
#include "memcomm/allocator/cuda_sources.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

namespace {

void require_gpu() {
  if (cuda_device_count() == 0) MEMCOMM_SKIP_TEST("no CUDA GPU on this machine");
  register_cuda_sources();  // make_source("cuda"/"cuda-vmm") below (Note [Sources by name])
}

// Allocates, writes with cudaMemset, reads back, frees; then a fixed-shape loop with no source calls
// after its second iteration.
void exercise(const std::string& name) {
  auto src = make_source(name);
  auto streams = make_cuda_streams(0);
  CachingAllocator a(src, {}, streams);
  std::vector<void*> ps;
  for (int i = 0; i < 64; ++i) {
    const std::size_t size = std::size_t(i % 9 + 1) * 1536 * KiB + 77;
    void* p = a.allocate(size);
    REQUIRE(cudaMemset(p, i, size) == cudaSuccess);
    unsigned char last = 0;
    REQUIRE(cudaMemcpy(&last, static_cast<char*>(p) + size - 1, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(last == static_cast<unsigned char>(i));
    ps.push_back(p);
  }
  for (void* p : ps) a.deallocate(p);
  a.check_invariants();
  std::int64_t calls = 0;
  for (int it = 0; it < 6; ++it) {
    std::vector<void*> step;
    for (int k = 0; k < 20; ++k) step.push_back(a.allocate(std::size_t(k + 1) * 3 * MiB));
    for (void* p : step) a.deallocate(p);
    if (it == 1) calls = a.stats().source_calls();
  }
  CHECK(a.stats().source_calls() == calls);
  // Cross-stream reuse waits for the other stream's work.
  cudaStream_t s2;
  REQUIRE(cudaStreamCreate(&s2) == cudaSuccess);
  void* p = a.allocate(8 * MiB);
  REQUIRE(cudaMemsetAsync(p, 1, 8 * MiB, s2) == cudaSuccess);
  a.record_stream(p, reinterpret_cast<StreamId>(s2));
  a.deallocate(p);
  REQUIRE(cudaStreamSynchronize(s2) == cudaSuccess);
  a.process_events();
  CHECK(a.stats().active.current == 0);
  cudaStreamDestroy(s2);
  a.empty_cache();
  CHECK(a.stats().reserved_bytes.current == 0);
  a.check_invariants();
}

}  // namespace

TEST_CASE("cuda source (cudaMalloc) on a GPU", "[allocator][gpu]") {
  require_gpu();
  exercise("cuda");
}

TEST_CASE("cuda-vmm source (driver VMM via dlopen) on a GPU", "[allocator][gpu]") {
  require_gpu();
  auto src = make_source("cuda-vmm");
  CHECK(src->can_map());
  CHECK(src->granularity() >= 2 * MiB);
  exercise("cuda-vmm");
}

TEST_CASE("cuda-vmm OOM under a capacity is a clean OutOfMemory", "[allocator][gpu]") {
  require_gpu();
  SourceOptions o;
  o.capacity = 64 * MiB;
  CachingAllocator a(make_source("cuda-vmm", o));
  void* p = a.allocate(48 * MiB);
  CHECK_THROWS_AS(a.allocate(32 * MiB), OutOfMemory);
  a.deallocate(p);
}
