// Helpers shared by the allocator tests.
#pragma once

#include <memory>
#include <vector>

#include "memcomm/allocator/allocator.hpp"
#include "memcomm/allocator/sources.hpp"
#include "memcomm_test.hpp"

namespace memcomm::alloc::test {

using memcomm::test::MiB;
constexpr std::size_t KiB = std::size_t(1) << 10;
constexpr std::size_t kPage = 2 * MiB;  // the simulated source's default granularity

inline std::shared_ptr<SimulatedSource> simulated(std::size_t capacity = 0) {
  SourceOptions o;
  o.capacity = capacity;
  return std::make_shared<SimulatedSource>(o);
}

// Records every event an allocator reports.
struct Recorder final : Observer {
  std::vector<AllocEvent> events;
  void on_event(const AllocEvent& e) noexcept override { events.push_back(e); }
  std::size_t count(EventKind k) const {
    std::size_t n = 0;
    for (const AllocEvent& e : events) n += e.kind == k;
    return n;
  }
};

inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// The segment that holds `p` in a snapshot, and the block starting at `p`.
inline const BlockInfo* find_block(const std::vector<SegmentInfo>& snap, const void* p) {
  for (const SegmentInfo& s : snap)
    for (const BlockInfo& b : s.blocks)
      if (b.address == addr(p)) return &b;
  return nullptr;
}

// A toy training step: twelve layers whose activations stack up in the forward pass (the layer
// pattern repeats every four layers, a shorter period than the step's), a temporary per layer, then
// a backward pass that frees activations while a few gradient buffers live. Sizes scale with `shape`.
inline void toy_training_step(CachingAllocator& a, std::size_t shape) {
  std::vector<void*> acts;
  for (int l = 0; l < 12; ++l) {
    acts.push_back(a.allocate(shape * (std::size_t(l % 4) + 1) * MiB + 777));
    a.deallocate(a.allocate(shape * 300 * KiB + 13));
  }
  std::vector<void*> grads;
  for (int l = 11; l >= 0; --l) {
    grads.push_back(a.allocate(shape * 2 * MiB + 5));
    a.deallocate(acts[std::size_t(l)]);
    if (grads.size() > 3) {
      a.deallocate(grads.front());
      grads.erase(grads.begin());
    }
  }
  for (void* g : grads) a.deallocate(g);
}

}  // namespace memcomm::alloc::test
