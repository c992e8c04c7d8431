// Splitting, merging, best fit, rounding and misuse, on both kinds of segments.
#include <cstring>

#include "allocator_test_util.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

namespace {
AllocatorConfig whole_segments() {
  AllocatorConfig c;
  c.expandable_segments = false;
  return c;
}
}  // namespace

TEST_CASE("sizes are rounded to min_block and blocks are aligned", "[allocator][blocks]") {
  CachingAllocator a(simulated());
  void* p = a.allocate(1);
  CHECK(a.block_size(p) == 512);
  CHECK(a.requested_size(p) == 1);
  void* q = a.allocate(513);
  CHECK(a.block_size(q) == 1024);
  CHECK(addr(p) % 512 == 0);
  CHECK(addr(q) % 512 == 0);
  CHECK(a.allocate(0) == nullptr);
  a.deallocate(nullptr);  // ignored, as free(NULL)
  a.deallocate(p);
  a.deallocate(q);
  a.check_invariants();
}

TEST_CASE("host memory rounds to 64 B, a device's to 512 B, unless the configuration names one", "[allocator][blocks]") {
  CachingAllocator host(make_source("host", {}));
  CHECK(host.config().min_block == kHostMinBlock);
  void* scalars[3] = {host.allocate(4), host.allocate(65), host.allocate(8)};
  CHECK(host.block_size(scalars[0]) == 64);
  CHECK(host.block_size(scalars[1]) == 128);
  CHECK(addr(scalars[2]) - addr(scalars[1]) == 128);  // packed: a scalar's block is a cache line
  for (void* p : scalars) CHECK(addr(p) % 64 == 0);
  for (void* p : scalars) host.deallocate(p);
  CachingAllocator device(simulated());
  CHECK(device.config().min_block == kDeviceMinBlock);
  AllocatorConfig named;
  named.min_block = 512;
  CachingAllocator host_named(make_source("host", {}), named);
  void* p = host_named.allocate(4);
  CHECK(host_named.block_size(p) == 512);
  host_named.deallocate(p);
  host.check_invariants();
}

TEST_CASE("a segment is split for the request and the rest stays free", "[allocator][blocks][split]") {
  CachingAllocator a(simulated(), whole_segments());
  void* p = a.allocate(100 * KiB);  // small pool: one 2 MiB segment
  auto snap = a.snapshot();
  REQUIRE(snap.size() == 1);
  CHECK(snap[0].size == 2 * MiB);
  REQUIRE(snap[0].blocks.size() == 2);
  CHECK(snap[0].blocks[0].allocated);
  CHECK(snap[0].blocks[0].size == 100 * KiB);
  CHECK_FALSE(snap[0].blocks[1].allocated);
  CHECK(snap[0].blocks[1].size == 2 * MiB - 100 * KiB);
  // The next small request is carved from the remainder, right after the first block.
  void* q = a.allocate(200 * KiB);
  CHECK(addr(q) == addr(p) + 100 * KiB);
  CHECK(a.stats().segment.current == 1);
  CHECK(a.stats().num_device_alloc == 1);
  a.check_invariants();
  a.deallocate(p);
  a.deallocate(q);
  a.check_invariants();
}

TEST_CASE("large remainders below min_large_split are not split off", "[allocator][blocks][split]") {
  CachingAllocator a(simulated(), whole_segments());
  // 19.5 MiB from a 20 MiB segment leaves 0.5 MiB < 1 MiB: the block keeps it (bounded waste).
  void* p = a.allocate(19 * MiB + 512 * KiB);
  CHECK(a.block_size(p) == 20 * MiB);
  CHECK(a.memory_summary().internal_waste == 512 * KiB);
  a.deallocate(p);
}

TEST_CASE("in an expandable segment every remainder is split off", "[allocator][blocks][split]") {
  // See Note [Splitting in expandable segments]: the 0.5 MiB left of the request's last page is free space
  // the next block starts in, not waste kept in this one.
  CachingAllocator a(simulated());
  void* p = a.allocate(19 * MiB + 512 * KiB);
  CHECK(a.block_size(p) == 19 * MiB + 512 * KiB);
  CHECK(a.memory_summary().internal_waste == 0);
  void* q = a.allocate(MiB + 512 * KiB);
  CHECK(addr(q) == addr(p) + 19 * MiB + 512 * KiB);  // packed against it, no page tail between them
  a.check_invariants();
  a.deallocate(p);
  a.deallocate(q);
}

TEST_CASE("freed neighbours merge back into one block", "[allocator][blocks][merge]") {
  for (bool expandable : {false, true}) {
    AllocatorConfig c;
    c.expandable_segments = expandable;
    CachingAllocator a(simulated(), c);
    void* x = a.allocate(64 * KiB);
    void* y = a.allocate(64 * KiB);
    void* z = a.allocate(64 * KiB);
    REQUIRE(addr(y) == addr(x) + 64 * KiB);
    REQUIRE(addr(z) == addr(y) + 64 * KiB);
    a.deallocate(x);
    a.deallocate(z);
    CHECK(a.stats().inactive_split.current >= 1);
    a.check_invariants();
    a.deallocate(y);
    a.process_events();  // files the parked frees: y merges with both sides
    a.check_invariants();
    auto snap = a.snapshot();
    std::size_t free_mapped = 0;
    for (auto& s : snap)
      for (auto& b : s.blocks) free_mapped += !b.allocated && b.mapped;
    CHECK(free_mapped == 1);
    // The merged block serves a request of all three together, at the same place.
    void* w = a.allocate(192 * KiB);
    CHECK(addr(w) == addr(x));
    a.deallocate(w);
  }
}

TEST_CASE("best fit picks the smallest free block that fits", "[allocator][blocks]") {
  CachingAllocator a(simulated(), whole_segments());
  void* big = a.allocate(512 * KiB);
  void* sep1 = a.allocate(4 * KiB);
  void* mid = a.allocate(128 * KiB);
  void* sep2 = a.allocate(4 * KiB);
  a.deallocate(big);
  a.deallocate(mid);
  void* p = a.allocate(100 * KiB);
  CHECK(addr(p) == addr(mid));
  a.deallocate(p);
  a.deallocate(sep1);
  a.deallocate(sep2);
  a.check_invariants();
}

TEST_CASE("best fit takes a hole before the growing end of an expandable segment", "[allocator][blocks]") {
  // See Note [The growing end is taken last]: the free mapped bytes below the unmapped range are smaller
  // than the hole, so plain best fit would cut them for a smaller request; the hole is taken instead.
  CachingAllocator a(simulated());
  void* hole = a.allocate(16 * MiB);
  void* keep = a.allocate(2 * MiB);
  a.deallocate(a.allocate(6 * MiB));  // its pages stay mapped: free bytes at the growing end
  a.deallocate(hole);
  a.process_events();  // files the parked frees
  std::size_t end_free = 0;
  for (auto& s : a.snapshot())
    for (std::size_t i = 0; i + 1 < s.blocks.size(); ++i)
      if (s.blocks[i].mapped && !s.blocks[i].allocated && !s.blocks[i + 1].mapped) end_free = s.blocks[i].size;
  REQUIRE(end_free >= 4 * MiB);
  REQUIRE(end_free < 12 * MiB);  // below what the hole keeps after the first request
  void* p = a.allocate(4 * MiB);
  CHECK(addr(p) == addr(hole));
  // A request the growing end fits exactly takes it: nothing of it is left to keep, and the rest of
  // the hole (12 MiB, which also fits) stays whole.
  void* exact = a.allocate(end_free);
  CHECK(addr(exact) == addr(keep) + 2 * MiB);
  a.check_invariants();
  a.deallocate(p);
  a.deallocate(exact);
  a.deallocate(keep);
}

TEST_CASE("a freed large block is filed at once, so best fit places the next request", "[allocator][blocks]") {
  // See Note [Recent frees]: the newest freed 8 MiB block lies in a range that is free as a whole once its
  // neighbour is freed too; best fit over that merged state takes the exact hole between live blocks.
  CachingAllocator a(simulated());
  void* x = a.allocate(8 * MiB);
  void* hole = a.allocate(8 * MiB);
  void* y = a.allocate(8 * MiB);
  REQUIRE(addr(hole) == addr(x) + 8 * MiB);
  REQUIRE(addr(y) == addr(hole) + 8 * MiB);
  void* p = a.allocate(8 * MiB);
  void* q = a.allocate(8 * MiB);
  REQUIRE(addr(q) == addr(p) + 8 * MiB);
  a.deallocate(hole);
  a.deallocate(p);
  a.deallocate(q);  // the newest freed 8 MiB block, merged with p's range
  void* r = a.allocate(8 * MiB);
  CHECK(addr(r) == addr(hole));
  // Small blocks keep the shortcut: the newest freed block of the size comes straight back.
  void* s1 = a.allocate(64 * KiB);
  void* s2 = a.allocate(64 * KiB);
  void* s3 = a.allocate(64 * KiB);
  a.deallocate(s1);
  a.deallocate(s3);
  void* s4 = a.allocate(64 * KiB);
  CHECK(addr(s4) == addr(s3));
  a.check_invariants();
  for (void* live : {x, y, r, s2, s4}) a.deallocate(live);
}

TEST_CASE("a filed block cut or grown in place still sorts where best fit looks for it", "[allocator][blocks]") {
  // See Note [Re-keying in place]: a cut leaves a remainder that sorts before the other holes, and a merge
  // makes a hole that sorts after one; both must move in the free set for best fit to find them.
  CachingAllocator a(simulated());
  void* h4 = a.allocate(4 * MiB);
  void* x6 = a.allocate(6 * MiB);
  void* s1 = a.allocate(2 * MiB);
  void* h8 = a.allocate(8 * MiB);
  void* s2 = a.allocate(2 * MiB);
  void* h12 = a.allocate(12 * MiB);
  void* s3 = a.allocate(2 * MiB);
  REQUIRE(addr(x6) == addr(h4) + 4 * MiB);
  REQUIRE(addr(h12) == addr(h8) + 10 * MiB);
  REQUIRE(addr(s3) == addr(h12) + 12 * MiB);
  for (void* p : {h4, h8, h12}) a.deallocate(p);  // holes of 4, 8 and 12 MiB between live blocks
  void* c10 = a.allocate(10 * MiB);
  CHECK(addr(c10) == addr(h12));
  a.check_invariants();
  void* c2 = a.allocate(2 * MiB);  // the 2 MiB left of the 12 MiB hole is now the best fit
  CHECK(addr(c2) == addr(h12) + 10 * MiB);
  a.deallocate(x6);  // the 4 MiB hole grows to 10 MiB, past the 8 MiB one
  a.check_invariants();
  void* c9 = a.allocate(9 * MiB);
  CHECK(addr(c9) == addr(h4));
  a.check_invariants();
  for (void* p : {s1, s2, s3, c10, c2, c9}) a.deallocate(p);
  a.check_invariants();
}

TEST_CASE("small and large requests use separate pools", "[allocator][blocks]") {
  CachingAllocator a(simulated());
  void* s = a.allocate(4 * KiB);
  void* l = a.allocate(4 * MiB);
  auto snap = a.snapshot();
  REQUIRE(snap.size() == 2);
  CHECK(snap[0].small_pool != snap[1].small_pool);
  a.deallocate(s);
  a.deallocate(l);
}

TEST_CASE("oversize blocks are not split for small requests", "[allocator][blocks][oversize]") {
  AllocatorConfig c = whole_segments();
  c.max_split_size = 32 * MiB;
  c.max_oversize_waste = 4 * MiB;
  CachingAllocator a(simulated(), c);
  void* big = a.allocate(64 * MiB);
  CHECK(a.stats().oversize_allocations.current == 1);
  a.deallocate(big);
  void* medium = a.allocate(16 * MiB);  // must not cut the cached 64 MiB block
  CHECK(addr(medium) != addr(big));
  void* big2 = a.allocate(62 * MiB);    // wastes 2 MiB < 4 MiB: reuses it
  CHECK(addr(big2) == addr(big));
  a.deallocate(big2);
  void* big3 = a.allocate(40 * MiB);    // would waste 24 MiB: a new segment instead
  CHECK(addr(big3) != addr(big));
  a.deallocate(big3);
  a.deallocate(medium);
  a.check_invariants();
}

TEST_CASE("double free and foreign pointers get a clear error", "[allocator][blocks][errors]") {
  CachingAllocator a(simulated());
  void* p = a.allocate(1000);
  a.deallocate(p);
  try {
    a.deallocate(p);
    FAIL("double free was accepted");
  } catch (const AllocatorError& e) {
    CHECK(std::string(e.what()).find("not a live block") != std::string::npos);
  }
  int local = 0;
  CHECK_THROWS_AS(a.deallocate(&local), AllocatorError);
  void* q = a.allocate(4096);
  CHECK_THROWS_AS(a.deallocate(static_cast<char*>(q) + 512), AllocatorError);  // interior pointer
  CHECK_THROWS_AS(a.record_stream(&local, 3), AllocatorError);
  CHECK_THROWS_AS(a.block_size(&local), AllocatorError);
  a.deallocate(q);
  a.check_invariants();
}

TEST_CASE("bad configuration is refused", "[allocator][config]") {
  AllocatorConfig c;
  c.min_block = 48;
  CHECK_THROWS_AS(CachingAllocator(simulated(), c), AllocatorError);
  CHECK_THROWS_AS(CachingAllocator(nullptr), AllocatorError);
}

TEST_CASE("expandable segments grow in place and map in runs", "[allocator][expandable]") {
  auto src = simulated();
  CachingAllocator a(src);
  void* p = a.allocate(10 * MiB);
  void* q = a.allocate(30 * MiB);
  // One virtual range per pool: the second block follows the first in the same segment.
  auto snap = a.snapshot();
  REQUIRE(snap.size() == 1);
  CHECK(snap[0].expandable);
  CHECK(addr(q) >= addr(p) + 10 * MiB);
  CHECK(src->is_backed(p, 10 * MiB));
  CHECK(src->is_backed(q, 30 * MiB));
  CHECK(a.stats().num_device_alloc == 0);
  CHECK(a.stats().num_device_map <= 2);
  a.deallocate(p);
  a.deallocate(q);
  a.empty_cache();
  CHECK(a.stats().reserved_bytes.current == 0);
  CHECK(src->counters().backed_bytes == 0);
  a.check_invariants();
}

TEST_CASE("a request spans a free mapped block and the unmapped hole after it", "[allocator][expandable]") {
  // See Note [Finding a window's free blocks]: a run of two or more free blocks is found from its unmapped
  // block, and reaches back to the free mapped block before it. No map-ahead: after empty_cache nothing
  // is free, and Note [Map-ahead on a ramp] (expandable.cpp) would map the hole's rest with q.
  auto src = simulated();
  AllocatorConfig cfg;
  cfg.map_ahead = 0;
  CachingAllocator a(src, cfg);
  void* p1 = a.allocate(20 * MiB);
  void* p2 = a.allocate(20 * MiB);
  void* p3 = a.allocate(20 * MiB);
  void* p4 = a.allocate(20 * MiB);
  REQUIRE(addr(p2) == addr(p1) + 20 * MiB);
  REQUIRE(addr(p3) == addr(p2) + 20 * MiB);
  REQUIRE(addr(p4) == addr(p3) + 20 * MiB);
  a.deallocate(p2);
  a.deallocate(p3);
  a.empty_cache();  // the 40 MiB between p1 and p4 is an unmapped hole now
  // As cheap as the range's end, and the smaller run: the hole's start.
  void* q = a.allocate(20 * MiB);
  REQUIRE(q == p2);
  a.deallocate(q);  // one run now: q's mapped pages, free, then the rest of the hole, unmapped
  const auto maps = a.stats().num_device_map;
  void* r = a.allocate(30 * MiB);
  CHECK(r == p2);  // the run's start, where only the hole's first pages need mapping
  CHECK(a.stats().num_device_map == maps + 1);
  CHECK(src->is_backed(r, 30 * MiB));
  a.check_invariants();
  a.deallocate(r);
  a.deallocate(p1);
  a.deallocate(p4);
  a.empty_cache();
  a.check_invariants();
}

TEST_CASE("mapped_runs reports each mapped run as a segment of its own, as PyTorch's snapshots do",
          "[allocator][snapshot]") {
  SegmentInfo expandable;
  expandable.base = 0x10000000;
  expandable.size = 64 * MiB;
  expandable.expandable = true;
  expandable.stream = 7;
  // | 2 MiB hole | 4 MiB allocated | 2 MiB free | 6 MiB hole | 2 MiB free | 48 MiB hole |
  const std::uint64_t b = expandable.base;
  expandable.blocks = {{b, 2 * MiB, 0, false, false, false},
                       {b + 2 * MiB, 4 * MiB, 3 * MiB, true, false, true},
                       {b + 6 * MiB, 2 * MiB, 0, false, false, true},
                       {b + 8 * MiB, 6 * MiB, 0, false, false, false},
                       {b + 14 * MiB, 2 * MiB, 0, false, true, true},
                       {b + 16 * MiB, 48 * MiB, 0, false, false, false}};
  SegmentInfo whole;
  whole.base = 0x20000000;
  whole.size = whole.mapped_bytes = 2 * MiB;
  whole.small_pool = true;
  whole.blocks = {{whole.base, 2 * MiB, 100, true, false, true}};

  const auto runs = mapped_runs({expandable, whole});
  REQUIRE(runs.size() == 3);
  CHECK(runs[0].base == b + 2 * MiB);
  CHECK(runs[0].size == 6 * MiB);
  CHECK(runs[0].mapped_bytes == 6 * MiB);
  CHECK(runs[0].blocks.size() == 2);
  CHECK(runs[0].stream == 7);
  CHECK(runs[0].expandable);
  CHECK(runs[1].base == b + 14 * MiB);
  CHECK(runs[1].size == 2 * MiB);
  CHECK(runs[1].blocks.front().pending);
  CHECK(runs[2].base == whole.base);
  CHECK(runs[2].size == 2 * MiB);
  CHECK(runs[2].small_pool);
  CHECK_FALSE(runs[2].expandable);
  for (const SegmentInfo& run : runs) {  // the blocks tile each run from its base
    std::uint64_t at = run.base;
    for (const BlockInfo& block : run.blocks) {
      CHECK(block.address == at);
      at += block.size;
    }
    CHECK(at == run.base + run.size);
  }
}
