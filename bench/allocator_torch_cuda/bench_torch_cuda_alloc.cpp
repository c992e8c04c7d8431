// alloc+free latency on one GPU, side by side in one run:
//   memcomm  - memcomm's adapter installed as torch's CUDA allocator (c10 raw_alloc/raw_delete through it)
//   torch    - torch's own CUDACachingAllocator (the object that was installed before ours)
//   cudaMalloc - raw cudaMalloc/cudaFree
// Each figure is the median over batches of the mean time of one cached alloc+free pair (the first
// pair of each size fills the caches and is not timed). Without a GPU: "skipped: no GPU", exit 77.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <memcomm/allocator/cuda_sources.hpp>
#include <memcomm/allocator/torch_allocator.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

// Median over `batches` of the mean ns of one alloc+free pair, `per_batch` pairs per batch.
double median_pair_ns(const std::function<void*()>& alloc, const std::function<void(void*)>& free_fn, int batches,
                      int per_batch) {
  free_fn(alloc());  // warm: the first pair may reach the device
  std::vector<double> means;
  for (int b = 0; b < batches; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per_batch; ++i) free_fn(alloc());
    const auto t1 = std::chrono::steady_clock::now();
    means.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / per_batch);
  }
  std::nth_element(means.begin(), means.begin() + means.size() / 2, means.end());
  return means[means.size() / 2];
}

}  // namespace

int main() {
  if (memcomm::alloc::cuda_device_count() == 0) {
    std::puts("skipped: no GPU");
    return 77;
  }
  cca::CUDAAllocator* torch_own = cca::get();  // torch's allocator, kept after ours is installed
  // torch's lazy CUDA init would call init() on whichever allocator is installed then (ours), so
  // torch's own one is initialised here; that allocates nothing, so installing ours stays allowed.
  torch_own->init(c10::cuda::device_count());
  memcomm::alloc::install_torch_cuda_allocator();
  cca::CUDAAllocator* ours = cca::get();
  std::printf("torch allocator: %s, ours: %s, memcomm source: ", torch_own->name().c_str(), ours->name().c_str());
  ours->raw_delete(ours->raw_alloc(512));  // builds device 0's engine
  std::printf("%s\n", memcomm::alloc::torch_cuda_allocator(0)->source().name());

  std::printf("%10s %14s %14s %14s %14s %16s\n", "size", "memcomm ns", "torch ns", "cudaMalloc ns",
              "memcomm/torch", "memcomm/cudaMalloc");
  for (const size_t size : {size_t(512), size_t(64) << 10, size_t(1) << 20, size_t(16) << 20, size_t(256) << 20}) {
    const double m = median_pair_ns([&] { return ours->raw_alloc(size); }, [&](void* p) { ours->raw_delete(p); },
                                    101, 1000);
    const double t = median_pair_ns([&] { return torch_own->raw_alloc(size); },
                                    [&](void* p) { torch_own->raw_delete(p); }, 101, 1000);
    const double c = median_pair_ns(
        [&] {
          void* p = nullptr;
          if (cudaMalloc(&p, size) != cudaSuccess) std::abort();
          return p;
        },
        [](void* p) { cudaFree(p); }, 21, 20);
    std::printf("%10zu %14.1f %14.1f %14.1f %14.2f %16.4f\n", size, m, t, c, m / t, m / c);
  }
  const auto s = memcomm::alloc::torch_cuda_allocator(0)->stats();
  std::printf("memcomm engine: %lld allocations, %lld source calls\n", static_cast<long long>(s.allocation.allocated),
              static_cast<long long>(s.source_calls()));
  return 0;
}
