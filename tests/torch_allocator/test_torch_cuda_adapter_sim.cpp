// The CUDA adapter's bookkeeping through torch's own entry points, on the simulated source
// (Note [Simulated CUDA adapter] in allocator/torch/src/torch_cuda_allocator.cpp): runs without a GPU.
// Only c10 headers: LibTorch first, then Catch takes CHECK back (Note [Two CHECKs]).
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>

#undef CHECK
#include "memcomm_test.hpp"

#include <memcomm/allocator/torch_allocator.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using Action = c10::CachingDeviceAllocator::TraceEntry::Action;
constexpr auto kAgg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
constexpr std::size_t kCapacity = std::size_t(64) << 20;

std::mutex g_trace_mu;
std::vector<Action> g_trace;         // actions seen by the attached trace tracker
std::atomic<int> g_oom_observed{0};  // calls of the attached OOM observer

bool traced(Action a) {
  std::lock_guard<std::mutex> lock(g_trace_mu);
  return std::find(g_trace.begin(), g_trace.end(), a) != g_trace.end();
}

memcomm::alloc::CachingAllocator& install_simulated() {
  memcomm::alloc::TorchAllocatorOptions o;
  o.cuda_source = "simulated";
  o.config.capacity = kCapacity;
  memcomm::alloc::install_torch_cuda_allocator(o);
  REQUIRE(cca::name() == "memcomm");
  REQUIRE(c10::GetAllocator(c10::DeviceType::CUDA) == cca::get());
  void* warm = cca::raw_alloc_with_stream(512, nullptr);  // builds device 0's engine
  cca::raw_delete(warm);
  auto* engine = memcomm::alloc::torch_cuda_allocator(0);
  REQUIRE(engine != nullptr);
  return *engine;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("CUDA adapter (simulated): allocations, stats, snapshot and frees agree with the engine") {
  auto& engine = install_simulated();
  cca::attachAllocatorTraceTracker([](const c10::CachingDeviceAllocator::TraceEntry& e) {
    std::lock_guard<std::mutex> lock(g_trace_mu);
    g_trace.push_back(e.action_);
  });
  cca::CUDAAllocator* adapter = cca::get();
  memcomm::alloc::install_torch_cuda_allocator();  // again: a no-op
  CHECK(cca::get() == adapter);
  CHECK(memcomm::alloc::torch_cuda_allocator(1) == nullptr);

  const auto base = engine.stats();
  void* p = cca::raw_alloc_with_stream(1000, nullptr);
  REQUIRE(p != nullptr);
  CHECK(engine.block_size(p) >= 1000);
  CHECK(engine.requested_size(p) == 1000);

  auto s = cca::getDeviceStats(0);
  const auto e = engine.stats();
  CHECK(s.allocation[kAgg].current == base.allocation.current + 1);
  CHECK(s.allocated_bytes[kAgg].current == e.allocated_bytes.current);
  CHECK(s.requested_bytes[kAgg].current == 1000);
  CHECK(s.reserved_bytes[kAgg].current == e.reserved_bytes.current);
  CHECK(s.num_device_alloc == e.num_device_alloc + e.num_device_map);

  {  // the c10::Allocator face: a DataPtr on CUDA:0 that frees through the adapter
    c10::DataPtr dp = adapter->allocate(4096);
    CHECK(dp.device() == c10::Device(c10::DeviceType::CUDA, 0));
    CHECK(dp.get_deleter() == adapter->raw_deleter());
    CHECK(dp.get() == dp.get_context());
    CHECK(engine.stats().allocation.current == base.allocation.current + 2);
    dp.clear();
    CHECK(engine.stats().allocation.current == base.allocation.current + 1);
    CHECK(adapter->allocate(0).get() == nullptr);
  }

  {  // the base allocation holds the block
    size_t size = 0;
    void* b = cca::getBaseAllocation(p, &size);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    CHECK(reinterpret_cast<std::uintptr_t>(b) <= a);
    CHECK(a + 1000 <= reinterpret_cast<std::uintptr_t>(b) + size);
    int local = 0;
    CHECK_FALSE(error_of([&] { cca::getBaseAllocation(&local, &size); }).empty());
  }

  {  // the snapshot shows the live block, and the segments tile what is reserved
    const auto snap = cca::snapshot();
    size_t total = 0;
    bool found = false;
    for (const auto& seg : snap.segments) {
      size_t sum = 0;
      for (const auto& b : seg.blocks) {
        sum += b.size;
        found = found || (b.allocated && b.requested_size == 1000);
      }
      CHECK(sum == seg.total_size);
      total += seg.total_size;
    }
    CHECK(found);
    CHECK(total == size_t(engine.stats().reserved_bytes.current));
    CHECK(snap.config_metadata.last_allocator_settings == "memcomm");
  }

  {  // accumulated totals and peaks reset as torch's do
    cca::resetAccumulatedStats(0);
    s = cca::getDeviceStats(0);
    CHECK(s.allocation[kAgg].allocated == 0);
    CHECK(s.allocation[kAgg].current == base.allocation.current + 1);
    CHECK(s.num_device_alloc == 0);
    cca::resetPeakStats(0);
    CHECK(cca::getDeviceStats(0).allocated_bytes[kAgg].peak == engine.stats().allocated_bytes.current);
  }

  cca::raw_delete(p);
  CHECK(engine.stats().allocation.current == base.allocation.current);
  CHECK(cca::getDeviceStats(0).allocation[kAgg].freed >= 1);
  CHECK_THROWS(cca::raw_delete(p));  // double free: memcomm's clear error
  cca::emptyCache();
  CHECK(engine.stats().reserved_bytes.current == 0);
  engine.check_invariants();

  CHECK(traced(Action::ALLOC));
  CHECK(traced(Action::FREE_REQUESTED));
  CHECK(traced(Action::FREE_COMPLETED));
  CHECK((traced(Action::SEGMENT_FREE) || traced(Action::SEGMENT_UNMAP)));  // from emptyCache
}

TEST_CASE("CUDA adapter (simulated): over capacity raises torch's OutOfMemoryError and notifies observers") {
  auto& engine = install_simulated();
  cca::attachOutOfMemoryObserver([](int64_t, size_t, size_t, size_t) { g_oom_observed++; });
  const auto ooms = engine.stats().num_ooms;
  bool thrown = false;
  try {
    cca::raw_alloc_with_stream(2 * kCapacity, nullptr);
  } catch (const c10::OutOfMemoryError& e) {
    thrown = true;
    CHECK(std::string(e.what()).find("CUDA out of memory") != std::string::npos);
    CHECK(std::string(e.what()).find("fragmentation") != std::string::npos);  // memcomm's figures
  }
  CHECK(thrown);
  // Far beyond any virtual range too: still torch's OutOfMemoryError, not another error.
  CHECK_THROWS_AS(cca::raw_alloc_with_stream(std::size_t(1) << 45, nullptr), c10::OutOfMemoryError);
  CHECK(g_oom_observed == 2);
  CHECK(engine.stats().num_ooms == ooms + 2);
  CHECK(cca::getDeviceStats(0).num_ooms == ooms + 2);
  void* p = cca::raw_alloc_with_stream(kCapacity / 2, nullptr);  // still serves what fits
  CHECK(p != nullptr);
  cca::raw_delete(p);
  engine.check_invariants();
}

TEST_CASE("CUDA adapter (simulated): unsupported features fail with a clear message") {
  install_simulated();
  const std::string msg = "not supported by memcomm's allocator";
  CHECK(error_of([] { cca::beginAllocateToPool(0, {1, 0}, [](cudaStream_t) { return true; }); }).find(msg) !=
        std::string::npos);
  CHECK(error_of([] { cca::endAllocateToPool(0, {1, 0}); }).find(msg) != std::string::npos);
  CHECK(error_of([] { cca::releasePool(0, {1, 0}); }).find(msg) != std::string::npos);
  CHECK(error_of([] { cca::getIpcDevPtr("handle"); }).find(msg) != std::string::npos);
  CHECK(error_of([] { cca::getCheckpointState(0, {1, 0}); }).find(msg) != std::string::npos);
  CHECK(error_of([] { cca::emptyCache({1, 0}); }).find(msg) != std::string::npos);
  CHECK(error_of([] {
          cca::recordHistory(true, nullptr, 100, c10::CachingDeviceAllocator::RecordContext::ALL, false, {});
        }).find(msg) != std::string::npos);
  CHECK(error_of([] {
          cca::recordHistory(false, nullptr, 0, c10::CachingDeviceAllocator::RecordContext::NEVER, false, {});
        }).empty());
  CHECK_FALSE(cca::isHistoryEnabled());
  CHECK_FALSE(error_of([] { cca::enable(false); }).empty());
  CHECK(cca::isEnabled());
  CHECK_FALSE(error_of([] { cca::setMemoryFraction(0.5, 0); }).empty());  // the engine exists already
  CHECK(cca::getMemoryFraction(0) == 1.0);
  CHECK_FALSE(error_of([] { cca::getDeviceStats(5); }).empty());
  memcomm::alloc::TorchAllocatorOptions bad;
  bad.cuda_source = "gpu";
  CHECK_THROWS_AS(memcomm::alloc::install_torch_cuda_allocator(bad), std::invalid_argument);
}
