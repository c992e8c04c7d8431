// See Note [Incremental allocator state]: state at a cursor from checkpoints + forward steps equals a
// fold of all events, and seeks cost at most one checkpoint interval.
#include "memcomm_test.hpp"

#include <memcomm/view/allocator_state.hpp>

#include <map>
#include <random>

using namespace memcomm::view;
using memcomm::prof::EventKind;

namespace {

// A valid random stream: segments of 64 MiB, blocks allocated and freed inside them.
AllocEvents random_events(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  AllocEvents ev;
  std::map<std::uint64_t, std::uint64_t> live;  // addr -> size (allocated or pending)
  std::map<std::uint64_t, bool> pending;
  const std::uint64_t seg = 0x10000000, seg_size = 64ull << 20, slot = 1ull << 20;
  ev.push_back({0, seg, seg_size, 0, EventKind::SegmentAlloc});
  std::int64_t t = 1;
  while (ev.size() < n) {
    const std::uint64_t addr = seg + (rng() % 64) * slot;
    ++t;
    auto it = live.find(addr);
    if (it == live.end()) {
      const std::uint64_t size = 4096 * (1 + rng() % 200);
      ev.push_back({t, addr, size, 0, EventKind::Alloc});
      live[addr] = size;
    } else if (!pending[addr]) {
      ev.push_back({t, addr, it->second, 0, EventKind::FreeRequested});
      pending[addr] = true;
    } else {
      ev.push_back({t, addr, it->second, 0, EventKind::FreeCompleted});
      live.erase(it);
      pending[addr] = false;
    }
  }
  return ev;
}

AllocatorState fold(const AllocEvents& ev, std::size_t n) {
  AllocatorState s;
  for (std::size_t i = 0; i < n; ++i) s.apply(ev[i]);
  return s;
}

bool same(const AllocatorState& a, const AllocatorState& b) {
  if (a.allocated != b.allocated || a.pending_free != b.pending_free || a.reserved != b.reserved ||
      a.segments.size() != b.segments.size() || a.block_count != b.block_count)
    return false;
  for (std::size_t i = 0; i < a.segments.size(); ++i) {
    const auto &x = a.segments[i].blocks, &y = b.segments[i].blocks;
    if (x.size() != y.size()) return false;
    for (std::size_t k = 0; k < x.size(); ++k)
      if (x[k].addr != y[k].addr || x[k].size != y[k].size || x[k].state != y[k].state) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("allocator state applies block and segment events", "[unit][viewer]") {
  AllocatorState s;
  s.apply({0, 0x1000, 0x1000, 0, EventKind::SegmentAlloc});
  s.apply({1, 0x1000, 0x100, 0, EventKind::Alloc});
  s.apply({2, 0x1400, 0x200, 0, EventKind::Alloc});
  CHECK(s.allocated == 0x300);
  CHECK(s.reserved == 0x1000);
  CHECK(s.largest_free() == 0x1000 - 0x600);  // free gap after the second block
  s.apply({3, 0x1000, 0x100, 0, EventKind::FreeRequested});
  CHECK(s.allocated == 0x200);
  CHECK(s.pending_free == 0x100);
  REQUIRE(s.segments.size() == 1);
  CHECK(s.segments[0].blocks[0].state == BlockState::PendingFree);
  s.apply({4, 0x1000, 0x100, 0, EventKind::FreeCompleted});
  CHECK(s.pending_free == 0);
  CHECK(s.block_count == 1);
  s.apply({5, 0x9999, 0x10, 0, EventKind::FreeCompleted});  // unknown block: counted, not fatal
  CHECK(s.unmatched == 1);
  s.apply({6, 0x1000, 0x1000, 0, EventKind::SegmentFree});
  CHECK(s.reserved == 0);
  CHECK(s.allocated == 0);
  CHECK(s.segments.empty());
}

TEST_CASE("allocator state at a cursor matches a full fold and is rebuilt incrementally", "[unit][viewer]") {
  const auto ev = random_events(20'000, 11);
  AllocatorTimeline tl(&ev, 1000);
  CHECK(tl.checkpoint_count() >= 10);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    const std::size_t n = rng() % (ev.size() + 1);
    const AllocatorState& got = tl.seek_index(n);
    INFO("seek to " << n);
    CHECK(same(got, fold(ev, n)));
    CHECK(tl.last_seek_cost() <= 1000);  // never more than one checkpoint interval
  }
  // Small forward steps apply only the new events.
  tl.seek_index(5000);
  tl.seek_index(5010);
  CHECK(tl.last_seek_cost() == 10);
  // Seek by time: events with t <= cursor.
  const AllocatorState& at = tl.seek(ev[777].t);
  CHECK(tl.position() == 778);
  CHECK(same(at, fold(ev, 778)));
}
