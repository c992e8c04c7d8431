// Cached alloc+free pair: memcomm's engine next to glibc malloc/free (and the replay's simulation of
// PyTorch's CUDACachingAllocator policy, single thread, when built), on 1, 2 and 4 threads.
// Run: build/bin/bench_allocator --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// and read the medians; the goal for memcomm single thread is <= 100 ns.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>

#include "memcomm/allocator/allocator.hpp"
#include "memcomm/allocator/sources.hpp"
#include "memcomm/replay/policy.hpp"

namespace {

using memcomm::alloc::CachingAllocator;

// One allocator shared by every thread of a run, as in a training process.
CachingAllocator& shared_allocator(bool host) {
  static CachingAllocator host_alloc(memcomm::alloc::make_source("host"));
  static CachingAllocator sim_alloc(memcomm::alloc::make_source("simulated"));
  return host ? host_alloc : sim_alloc;
}

void BM_glibc_malloc_free(benchmark::State& state) {
  const auto size = std::size_t(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(size);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}

template <bool Host>
void BM_memcomm_alloc_free(benchmark::State& state) {
  const auto size = std::size_t(state.range(0));
  CachingAllocator& a = shared_allocator(Host);
  // Each thread uses its own stream id, so the pair is a cached hit in that stream's pool.
  const auto stream = memcomm::alloc::StreamId(state.thread_index());
  a.deallocate(a.allocate(size, stream));  // warm the cache
  for (auto _ : state) {
    void* p = a.allocate(size, stream);
    benchmark::DoNotOptimize(p);
    a.deallocate(p);
  }
}

// Same stream on every thread: all threads hit the same pool and free set.
void BM_memcomm_alloc_free_one_stream(benchmark::State& state) {
  const auto size = std::size_t(state.range(0));
  CachingAllocator& a = shared_allocator(true);
  a.deallocate(a.allocate(size));
  for (auto _ : state) {
    void* p = a.allocate(size);
    benchmark::DoNotOptimize(p);
    a.deallocate(p);
  }
}

void BM_pytorch_policy_alloc_free(benchmark::State& state) {
  const auto size = std::uint64_t(state.range(0));
  auto policy = memcomm::replay::make_policy("pytorch", memcomm::replay::PolicyOptions{});
  policy->free(*policy->allocate(size, 0));
  for (auto _ : state) {
    auto p = policy->allocate(size, 0);
    benchmark::DoNotOptimize(p);
    policy->free(*p);
  }
}
BENCHMARK(BM_pytorch_policy_alloc_free)->Arg(4096)->Arg(1 << 20)->Arg(8 << 20);

}  // namespace

BENCHMARK(BM_glibc_malloc_free)->Arg(4096)->Arg(1 << 20)->Arg(8 << 20)->Threads(1)->Threads(2)->Threads(4);
BENCHMARK_TEMPLATE(BM_memcomm_alloc_free, true)->Name("BM_memcomm_host_alloc_free")
    ->Arg(4096)->Arg(1 << 20)->Arg(8 << 20)->Threads(1)->Threads(2)->Threads(4);
BENCHMARK_TEMPLATE(BM_memcomm_alloc_free, false)->Name("BM_memcomm_simulated_alloc_free")
    ->Arg(4096)->Arg(8 << 20)->Threads(1);
BENCHMARK(BM_memcomm_alloc_free_one_stream)->Arg(4096)->Threads(1)->Threads(2)->Threads(4);

// A 16-allocation "iteration" repeated: each alloc+free pair served from the cache.
void BM_memcomm_iteration_alloc_free(benchmark::State& state) {
  CachingAllocator a(memcomm::alloc::make_source("simulated"));
  void* live[16];
  auto iteration = [&] {
    for (std::size_t i = 0; i < 16; ++i) live[i] = a.allocate((i % 4 + 1) << 20);
    for (std::size_t i = 0; i < 16; ++i) a.deallocate(live[i]);
  };
  for (int warm = 0; warm < 8; ++warm) iteration();
  for (auto _ : state) iteration();
  state.SetItemsProcessed(state.iterations() * 16);  // items/s = alloc+free pairs per second
}
BENCHMARK(BM_memcomm_iteration_alloc_free)->Name("BM_memcomm_caching_iteration");

BENCHMARK_MAIN();
