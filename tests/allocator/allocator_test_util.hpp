// Helpers shared by the allocator tests.
#pragma once

#include <memory>
#include <vector>

#include "memcomm/allocator/allocator.hpp"
#include "memcomm/allocator/sources.hpp"
#include "memcomm_test.hpp"

namespace memcomm::alloc::test {

constexpr std::size_t MiB = std::size_t(1) << 20;
constexpr std::size_t KiB = std::size_t(1) << 10;

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

}  // namespace memcomm::alloc::test
