// See engine_policy.hpp. The engine throws OutOfMemory when the capacity leaves no room; a replay
// counts that as an OOM and goes on, as a training job that catches the error would.
#include "engine_policy.hpp"

#include "memcomm/allocator/allocator.hpp"
#include "memcomm/allocator/sources.hpp"
#include "memcomm/trace/event.hpp"

namespace memcomm::replay {
namespace {

class EnginePolicy final : public Policy {
 public:
  explicit EnginePolicy(const PolicyOptions& options) {
    alloc::SourceOptions so;
    so.capacity = options.capacity;
    so.device = options.device;
    alloc::AllocatorConfig cfg;
    cfg.capacity = options.capacity;
    // Host memory's blocks are rounded as memcomm's CPU allocator rounds them; the simulated source
    // is no host memory, so its own rounding is a device's (Note [Rounding follows the memory]).
    if (options.device == prof::kHostDevice) cfg.min_block = alloc::kHostMinBlock;
    engine_ = std::make_unique<alloc::CachingAllocator>(alloc::make_source("simulated", so), cfg);
  }

  std::string name() const override { return "memcomm"; }

  std::optional<std::uint64_t> allocate(std::uint64_t size, std::int64_t stream) override {
    try {
      void* p = engine_->allocate(static_cast<std::size_t>(size), static_cast<alloc::StreamId>(stream));
      return reinterpret_cast<std::uintptr_t>(p);
    } catch (const alloc::OutOfMemory&) {
      return std::nullopt;
    }
  }

  void free(std::uint64_t addr) override { engine_->deallocate(reinterpret_cast<void*>(static_cast<std::uintptr_t>(addr))); }

  PolicyStats stats() const override {
    alloc::DeviceStats s = engine_->stats();
    PolicyStats out;
    out.reserved = static_cast<std::uint64_t>(s.reserved_bytes.current);
    out.peak_reserved = static_cast<std::uint64_t>(s.reserved_bytes.peak);
    out.allocated = static_cast<std::uint64_t>(s.allocated_bytes.current);
    out.peak_allocated = static_cast<std::uint64_t>(s.allocated_bytes.peak);
    out.source_allocs = static_cast<std::uint64_t>(s.source_calls());
    out.source_frees = static_cast<std::uint64_t>(s.num_device_free + s.num_device_unmap);
    out.retries = static_cast<std::uint64_t>(s.num_alloc_retries);
    return out;
  }

  void check_invariants() const override { engine_->check_invariants(); }

 private:
  std::unique_ptr<alloc::CachingAllocator> engine_;
};

}  // namespace

std::unique_ptr<Policy> make_engine_policy(const PolicyOptions& options) {
  return std::make_unique<EnginePolicy>(options);
}

}  // namespace memcomm::replay
