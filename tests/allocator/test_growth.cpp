// How the expandable pools grow: page budget floor for small arenas, small-pool chunks at the budget
// (Note [Lazy page release] in allocator/core/growth.cpp), and no growth at all in a fixed-shape
// loop's steady state.
#include "allocator_test_util.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

TEST_CASE("a fixed-shape loop makes no source calls after iteration 2", "[allocator][steady]") {
  for (bool expandable : {true, false}) {
    AllocatorConfig c;
    c.expandable_segments = expandable;
    CachingAllocator a(simulated(), c);
    std::vector<void*> params;  // allocated before the first step, live throughout
    for (int i = 0; i < 8; ++i) params.push_back(a.allocate((std::size_t(i) + 1) * 3 * MiB + 1000));
    std::int64_t calls_after_2 = 0;
    for (int it = 0; it < 12; ++it) {
      toy_training_step(a, 4);
      if (it == 1) calls_after_2 = a.stats().source_calls();
    }
    INFO("expandable=" << expandable);
    CHECK(a.stats().source_calls() == calls_after_2);
    a.check_invariants();
    for (void* p : params) a.deallocate(p);
  }
}

TEST_CASE("a small arena's reserved bytes stay within 5% of its peak", "[allocator][growth]") {
  // ~100 MiB reached by 7.5 MiB steps: a fixed 4 MiB floor alone would be 4% of it.
  CachingAllocator a(simulated());
  std::vector<void*> live;
  for (int i = 0; i < 2; ++i) live.push_back(a.allocate(MiB / 4));
  for (int i = 0; i < 14; ++i) {
    live.push_back(a.allocate(15 * MiB / 2));
    if (i % 3 == 0) live.push_back(a.allocate(MiB));
  }
  const DeviceStats s = a.stats();
  INFO("reserved " << s.reserved_bytes.peak << " allocated " << s.allocated_bytes.peak);
  CHECK(double(s.reserved_bytes.peak) <= 1.05 * double(s.allocated_bytes.peak));
  a.check_invariants();
  for (void* p : live) a.deallocate(p);
}

TEST_CASE("a large-pool growth maps at least a medium segment, and a larger one is not rounded up",
          "[allocator][growth]") {
  // Note [Map ahead]. A budget with room to spare (slack 10 x the high water) and no map-ahead share
  // leaves only the minimum.
  AllocatorConfig c;
  c.release_slack = 10.0;
  c.map_ahead = 0;
  CachingAllocator a(simulated(), c);
  void* p = a.allocate(3 * MiB);
  CHECK(a.stats().reserved_bytes.current == std::int64_t(c.medium_segment));  // 3 MiB asked, 20 MiB mapped
  void* q = a.allocate(41 * MiB);  // 17 MiB of the first growth are free: it maps the next 24 MiB
  CHECK(a.stats().reserved_bytes.current == std::int64_t(44 * MiB));  // not 60 MiB (whole segments)
  a.check_invariants();
  a.deallocate(p);
  a.deallocate(q);
}

namespace {
// Decoding with a KV cache grown by concatenation: 28 x 50 MiB of weights, then 16 layers' caches of
// `len` bytes that grow by 256 KiB a step for 100 steps. Each step makes a longer copy of every cache
// while the old one is live; with `query` > 0 each layer also holds a query tensor of that size around
// its copy, and with `logits` > 0 each step ends with a logits tensor of that size. Returns the source
// calls the steps made, maps and unmaps.
std::int64_t decode_calls(CachingAllocator& a, std::size_t len, std::size_t query, std::size_t logits) {
  std::vector<void*> weights;
  for (int i = 0; i < 28; ++i) weights.push_back(a.allocate(50 * MiB));
  std::vector<void*> cache;
  for (int l = 0; l < 16; ++l) cache.push_back(a.allocate(len));
  const std::int64_t before = a.stats().source_calls() + a.stats().num_device_unmap;
  for (int step = 0; step < 100; ++step) {
    len += 256 * KiB;
    for (void*& c : cache) {
      void* q = query ? a.allocate(query) : nullptr;
      void* grown = a.allocate(len);
      a.deallocate(c);
      c = grown;
      if (q) a.deallocate(q);
    }
    if (logits) a.deallocate(a.allocate(logits));
  }
  const std::int64_t calls = a.stats().source_calls() + a.stats().num_device_unmap - before;
  a.check_invariants();
  for (void* c : cache) a.deallocate(c);
  for (void* w : weights) a.deallocate(w);
  return calls;
}
}  // namespace

TEST_CASE("a slot that grows every step at the budget maps a medium segment at a time", "[allocator][growth]") {
  // See Note [A slot that grows at the budget]: caches of 40 MiB, 2% of live each. 100 steps grow live
  // bytes by 400 MiB: 20 medium segments.
  CachingAllocator a(simulated());
  const std::int64_t calls = decode_calls(a, 40 * MiB, 0, 0);
  const DeviceStats s = a.stats();
  INFO("calls " << calls << ", reserved " << s.reserved_bytes.peak << ", allocated " << s.allocated_bytes.peak);
  CHECK(calls <= 40);  // a growth per step would be 100
  CHECK(double(s.reserved_bytes.peak) <= 1.03 * double(s.allocated_bytes.peak));
}

TEST_CASE("a cache just above the budget's slack keeps its slot instead of trading pages every layer",
          "[allocator][growth]") {
  // See Note [A tensor that grows by concatenation]: caches of 44 MiB, 2.1% of live at the start and 2.7%
  // at the end, more than the 2% the plain budget leaves, with a 64 KiB query per layer and 3 MiB of
  // logits per step. The budget grows by what the first grown copy misses, within 3% of live; without
  // that it gave back a page for every page a layer's copy mapped: 309 calls, 62 of them unmaps.
  CachingAllocator a(simulated());
  const std::int64_t calls = decode_calls(a, 44 * MiB, 64 * KiB, 3 * MiB);
  const DeviceStats s = a.stats();
  INFO("calls " << calls << ", unmaps " << s.num_device_unmap << ", reserved " << s.reserved_bytes.peak
                << ", allocated " << s.allocated_bytes.peak);
  CHECK(calls <= 80);
  CHECK(double(s.reserved_bytes.peak) <= 1.03 * double(s.allocated_bytes.peak));
}

TEST_CASE("on a ramp past free holes, a growth maps a medium segment and gives the holes' pages back",
          "[allocator][growth]") {
  // See Note [Map-ahead's minimum at the budget]: eight 3 MiB holes between kept blocks fill the budget's
  // headroom, and none holds the ramp's 6.8 MiB requests. Within the plain budget each growth could map
  // only its request's pages: 40 calls for 40 requests. Up to the budget's ceiling it maps 20 MiB and
  // gives back hole pages to pay for it.
  CachingAllocator a(simulated());
  std::vector<void*> kept{a.allocate(800 * MiB)};
  std::vector<void*> holes;
  for (int i = 0; i < 8; ++i) {
    holes.push_back(a.allocate(3 * MiB));
    kept.push_back(a.allocate(5 * MiB));
  }
  for (void* h : holes) a.deallocate(h);
  const DeviceStats before = a.stats();
  for (int i = 0; i < 40; ++i) kept.push_back(a.allocate(6963 * KiB));
  const DeviceStats s = a.stats();
  const std::int64_t maps = s.num_device_map - before.num_device_map;
  const std::int64_t unmaps = s.num_device_unmap - before.num_device_unmap;
  INFO("maps " << maps << ", unmaps " << unmaps << ", reserved " << s.reserved_bytes.peak << ", allocated "
               << s.allocated_bytes.peak);
  CHECK(maps + unmaps <= 30);
  CHECK(unmaps >= 1);  // hole pages paid for the medium segments
  CHECK(double(s.reserved_bytes.peak) <= 1.03 * double(s.allocated_bytes.peak));
  a.check_invariants();
  for (void* p : kept) a.deallocate(p);
}

TEST_CASE("a clean ramp of medium requests maps a whole medium segment past each growth's request",
          "[allocator][growth]") {
  // See Note [A medium ramp maps whole pages]: 10 MiB requests climb with nothing free behind them. A
  // growth of the 20 MiB minimum serves two of them (50 growths for 100); a segment past the request,
  // three.
  CachingAllocator a(simulated());
  std::vector<void*> kept{a.allocate(1024 * MiB)};
  const DeviceStats before = a.stats();
  for (int i = 0; i < 100; ++i) kept.push_back(a.allocate(10 * MiB));
  const DeviceStats s = a.stats();
  const std::int64_t calls = s.source_calls() - before.source_calls();
  INFO("calls " << calls << ", reserved " << s.reserved_bytes.peak << ", allocated " << s.allocated_bytes.peak);
  CHECK(calls <= 40);
  CHECK(double(s.reserved_bytes.peak) <= 1.03 * double(s.allocated_bytes.peak));
  a.check_invariants();
  for (void* p : kept) a.deallocate(p);
}

TEST_CASE("after a peak of large blocks the small pool still grows in chunks", "[allocator][growth]") {
  CachingAllocator a(simulated());
  std::vector<void*> large;
  for (int i = 0; i < 100; ++i) large.push_back(a.allocate(10 * MiB + 4096));
  for (void* p : large) a.deallocate(p);  // reserved stays at the budget: nothing forces a release
  const std::int64_t maps_before = a.stats().num_device_map;
  std::vector<void*> small;
  for (int i = 0; i < 80; ++i) small.push_back(a.allocate(512 * KiB));  // 40 MiB of small blocks
  const std::int64_t maps = a.stats().num_device_map - maps_before;
  INFO("maps for 40 MiB of small blocks: " << maps);
  CHECK(maps <= 8);  // a page per call would be 20; within the high water it takes 7 (Note [Map-ahead in a trough])
  const DeviceStats s = a.stats();
  CHECK(double(s.reserved_bytes.peak) <= 1.05 * double(s.allocated_bytes.peak));
  a.check_invariants();
  for (void* p : small) a.deallocate(p);
}

TEST_CASE("pools that peak at different moments stop trading pages after iteration 3", "[allocator][growth][steady]") {
  // See Note [Release churn]: the small pool peaks early in each iteration, the large pool late; their
  // footprints together exceed the page budget of the overall high water by a page or two, which made
  // the budget unmap one pool's free pages to map the other's, and back, in every iteration. The
  // budget learns from the second regain (Note [Release churn]); at a 2% slack that is iteration 3.
  CachingAllocator a(simulated());
  void* params = a.allocate(60 * MiB);
  std::int64_t calls_after_3 = 0, unmaps_after_3 = 0;
  for (int it = 0; it < 12; ++it) {
    std::vector<void*> v;
    for (int i = 0; i < 8; ++i) v.push_back(a.allocate(512 * KiB));  // small pool: 4 MiB
    for (void* p : v) a.deallocate(p);
    v.clear();
    for (int i = 0; i < 2; ++i) v.push_back(a.allocate(2 * MiB));  // large pool: 4 MiB
    for (void* p : v) a.deallocate(p);
    if (it == 2) {
      calls_after_3 = a.stats().source_calls();
      unmaps_after_3 = a.stats().num_device_unmap;
    }
  }
  const DeviceStats s = a.stats();
  INFO("calls " << s.source_calls() << " after iteration 3: " << calls_after_3 << ", unmaps " << s.num_device_unmap
                << " reserved peak " << s.reserved_bytes.peak << " allocated peak " << s.allocated_bytes.peak);
  CHECK(s.source_calls() == calls_after_3);
  CHECK(s.num_device_unmap == unmaps_after_3);
  CHECK(double(s.reserved_bytes.peak) <= 1.08 * double(s.allocated_bytes.peak));
  a.check_invariants();
  a.deallocate(params);
}

TEST_CASE("in a trough, map-ahead does not take reserved bytes past their peak", "[allocator][growth]") {
  // See Note [Map-ahead in a trough]: a training step's activations make the peak in the large pool; the
  // optimizer step after it needs small blocks while the activations' pages sit free. The small pool's
  // growth maps its own pages, but nothing ahead of them past the peak of reserved bytes.
  CachingAllocator a(simulated());
  std::vector<void*> v;
  for (int i = 0; i < 40; ++i) v.push_back(a.allocate(50 * MiB));  // 2000 MiB of activations
  for (void* p : v) a.deallocate(p);
  v.clear();
  const std::int64_t peak = a.stats().reserved_bytes.peak;
  for (int i = 0; i < 16; ++i) v.push_back(a.allocate(512 * KiB));  // 8 MiB of optimizer temporaries
  const DeviceStats s = a.stats();
  INFO("reserved peak " << s.reserved_bytes.peak / MiB << " MiB, before the small blocks " << peak / MiB << " MiB");
  CHECK(s.reserved_bytes.peak <= peak + std::int64_t(8 * MiB));  // the blocks' own pages at most
  a.check_invariants();
  for (void* p : v) a.deallocate(p);
}

TEST_CASE("small temporaries in a trough borrow a large hole rather than trade pages with the large pool",
          "[allocator][growth][steady]") {
  // See Note [A small request in a trough borrows a large hole]: each iteration peaks with ~98 MiB of
  // large activations; after they are freed, 6 MiB of small temporaries would grow the small pool at
  // the page budget by unmapping the large pool's free pages, which the next peak maps again.
  CachingAllocator a(simulated());
  std::vector<void*> params;
  for (int i = 0; i < 16; ++i) params.push_back(a.allocate(256 * KiB));  // the small pool holds pages
  std::int64_t calls_after_3 = 0;
  for (int it = 0; it < 10; ++it) {
    std::vector<void*> acts, temps;
    for (int i = 0; i < 10; ++i) acts.push_back(a.allocate(39 * MiB / 4));
    for (void* p : acts) a.deallocate(p);
    for (int i = 0; i < 12; ++i) temps.push_back(a.allocate(512 * KiB));
    for (void* p : temps) a.deallocate(p);
    if (it == 2) calls_after_3 = a.stats().source_calls();
  }
  const DeviceStats s = a.stats();
  INFO("reserved " << s.reserved_bytes.peak << ", allocated " << s.allocated_bytes.peak << ", lent "
                   << s.num_cross_class_allocs << ", calls " << s.source_calls());
  CHECK(s.num_cross_class_allocs > 0);
  CHECK(s.source_calls() == calls_after_3);
  CHECK(double(s.reserved_bytes.peak) <= 1.03 * double(s.allocated_bytes.peak));
  a.check_invariants();
  for (void* p : params) a.deallocate(p);
}

TEST_CASE("after empty_cache a smaller run reserves what it would in a fresh allocator", "[allocator][growth]") {
  // See Note [Emptying the cache forgets the high water]: a tuner probes a large micro-batch, empties the
  // cache, then probes a small one; the large run's high water let the small one map up to its footprint.
  CachingAllocator fresh(simulated());
  std::vector<void*> params;
  for (int i = 0; i < 4; ++i) params.push_back(fresh.allocate(MiB + 100));
  toy_training_step(fresh, 1);
  const std::int64_t small_alone = fresh.stats().reserved_bytes.peak;

  CachingAllocator a(simulated());
  std::vector<void*> kept;
  for (int i = 0; i < 4; ++i) kept.push_back(a.allocate(MiB + 100));
  toy_training_step(a, 8);  // the large probe
  a.empty_cache();
  a.reset_peak_stats();
  toy_training_step(a, 1);
  INFO("small step alone " << small_alone << " B reserved; after a large one and empty_cache "
                           << a.stats().reserved_bytes.peak << " B");
  CHECK(a.stats().reserved_bytes.peak <= small_alone + std::int64_t(2 * MiB));
  a.check_invariants();
  for (void* p : params) fresh.deallocate(p);
  for (void* p : kept) a.deallocate(p);
}
