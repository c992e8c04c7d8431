// Randomized property test: 10^6 operations against a shadow model.
// Invariants: live blocks never overlap and lie in backed memory; the allocator's counters agree with
// the shadow's sums; every byte of every segment is in exactly one block (check_invariants).
#include <map>
#include <random>

#include "allocator_test_util.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

namespace {

struct Live {
  std::size_t requested;  // bytes asked for
  std::size_t size;       // block size the allocator reported
  StreamId stream;
};

void run(std::uint64_t seed, const AllocatorConfig& config, std::size_t capacity, int ops) {
  auto src = simulated(capacity);
  auto streams = std::make_shared<ManualStreams>();
  CachingAllocator a(src, config, streams);
  std::mt19937_64 rng(seed);
  std::map<std::uintptr_t, Live> live;   // shadow of the live blocks, by address
  std::vector<std::uintptr_t> order;     // live addresses, for picking one at random
  std::int64_t requested = 0, allocated = 0, ooms = 0;
  auto pick_size = [&]() -> std::size_t {
    switch (rng() % 8) {
      case 0: return 1 + rng() % 512;
      case 1: case 2: case 3: return 1 + rng() % (256 * KiB);
      case 4: case 5: return 1 + rng() % (4 * MiB);
      case 6: return 4 * MiB + rng() % (28 * MiB);
      default: return (1 + rng() % 16) * 2 * MiB;  // exact page multiples
    }
  };
  for (int i = 0; i < ops; ++i) {
    const auto r = rng() % 100;
    if (r < 52 || order.empty()) {
      const std::size_t size = pick_size();
      const StreamId stream = rng() % 10 == 0 ? 1 : 0;
      void* p = nullptr;
      try {
        p = a.allocate(size, stream);
      } catch (const OutOfMemory&) {
        ++ooms;
        continue;
      }
      const auto x = addr(p);
      const std::size_t bsize = a.block_size(p);
      REQUIRE(bsize >= size);
      REQUIRE(x % a.config().min_block == 0);
      // No overlap with the neighbours in the shadow.
      auto next = live.lower_bound(x);
      if (next != live.end()) REQUIRE(x + bsize <= next->first);
      if (next != live.begin()) {
        auto prev = std::prev(next);
        REQUIRE(prev->first + prev->second.size <= x);
      }
      if (i % 64 == 0) REQUIRE(src->is_backed(p, bsize));
      live.emplace(x, Live{size, bsize, stream});
      order.push_back(x);
      requested += std::int64_t(size);
      allocated += std::int64_t(bsize);
    } else if (r < 98) {
      const std::size_t k = rng() % order.size();
      const std::uintptr_t x = order[k];
      order[k] = order.back();
      order.pop_back();
      auto it = live.find(x);
      if (rng() % 20 == 0) a.record_stream(reinterpret_cast<void*>(x), 2 + rng() % 2);
      a.deallocate(reinterpret_cast<void*>(x));
      requested -= std::int64_t(it->second.requested);
      allocated -= std::int64_t(it->second.size);
      live.erase(it);
    } else if (r < 99) {
      streams->complete(2 + rng() % 2);
    } else if (rng() % 50 == 0) {
      a.empty_cache();
    }
    if (i % 16384 == 0) {
      const DeviceStats s = a.stats();
      REQUIRE(s.requested_bytes.current == requested);
      REQUIRE(s.allocated_bytes.current == allocated);
      REQUIRE(s.allocation.current == std::int64_t(live.size()));
      REQUIRE(s.reserved_bytes.current >= s.allocated_bytes.current);
      if (capacity) REQUIRE(s.reserved_bytes.peak <= std::int64_t(capacity));
      a.check_invariants();
    }
  }
  const DeviceStats s = a.stats();
  CHECK(s.num_ooms == ooms);
  CHECK(s.requested_bytes.current == requested);
  a.check_invariants();
  for (auto& [x, l] : live) a.deallocate(reinterpret_cast<void*>(x));
  streams->complete_all();
  a.empty_cache();
  CHECK(a.stats().reserved_bytes.current == 0);
  CHECK(src->counters().backed_bytes == 0);
  a.check_invariants();
}

}  // namespace

TEST_CASE("10^6 random operations keep every invariant (expandable, unlimited)", "[allocator][property]") {
  run(1, AllocatorConfig{}, 0, 400000);
}

TEST_CASE("random operations under a tight capacity (expandable)", "[allocator][property]") {
  run(2, AllocatorConfig{}, 512 * MiB, 200000);
}

TEST_CASE("random operations with whole segments", "[allocator][property]") {
  AllocatorConfig c;
  c.expandable_segments = false;
  run(3, c, 768 * MiB, 200000);
}
