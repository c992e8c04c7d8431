// Capacity, OOM with retry, garbage collection and empty_cache.
#include "allocator_test_util.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

TEST_CASE("without expandable segments, an OOM names the whole segment a request takes", "[allocator][oom]") {
  // A 3.8 MiB request under a 16 MiB cap failed with "reserved 0 B": it needs a 20 MiB segment.
  AllocatorConfig c;
  c.expandable_segments = false;
  CachingAllocator a(simulated(16 * MiB), c);
  CHECK_THROWS_WITH(a.allocate(4 * MiB), Catch::Contains("reserved 0 B") &&
                                             Catch::Contains("takes a whole 20.00 MiB segment"));
  c.expandable_segments = true;
  CachingAllocator b(simulated(16 * MiB), c);
  b.deallocate(b.allocate(4 * MiB));  // mapped page by page: it fits
}

TEST_CASE("running past the capacity throws OutOfMemory with the figures", "[allocator][oom]") {
  for (bool expandable : {true, false}) {
    AllocatorConfig c;
    c.expandable_segments = expandable;
    Recorder rec;
    CachingAllocator a(simulated(64 * MiB), c);
    a.add_observer(&rec);
    void* p = a.allocate(40 * MiB);
    try {
      a.allocate(30 * MiB);
      FAIL("allocation past the capacity succeeded");
    } catch (const OutOfMemory& e) {
      const std::string what = e.what();
      CHECK(what.find("out of memory") != std::string::npos);
      CHECK(what.find("requested 31457280 bytes") != std::string::npos);
      CHECK(what.find("reserved") != std::string::npos);
      CHECK(what.find("allocated 40.00 MiB") != std::string::npos);
      CHECK(what.find("largest free block") != std::string::npos);
      CHECK(what.find("fragmentation") != std::string::npos);
      CHECK(e.requested == 30 * MiB);
      CHECK(e.allocated == 40 * MiB);
      CHECK(e.reserved <= 64 * MiB);
    }
    const DeviceStats s = a.stats();
    CHECK(s.num_ooms == 1);
    CHECK(s.num_alloc_retries == 1);
    CHECK(rec.count(EventKind::Oom) == 1);
    CHECK(s.reserved_bytes.peak <= std::int64_t(64 * MiB));
    a.check_invariants();
    // Nothing is lost: after freeing, the same request fits.
    a.deallocate(p);
    void* q = a.allocate(30 * MiB);
    a.deallocate(q);
    a.check_invariants();
    a.remove_observer(&rec);
  }
}

TEST_CASE("a capacity below what a request reserves at least says so", "[allocator][oom]") {
  // 16 B under a 1 KiB cap with nothing reserved read as a contradiction: the request maps a page.
  for (bool expandable : {true, false}) {
    AllocatorConfig c;
    c.expandable_segments = expandable;
    CachingAllocator a(simulated(KiB), c);
    INFO("expandable " << expandable);
    CHECK_THROWS_WITH(a.allocate(16), Catch::Contains(expandable ? "2.00 MiB at a time for this request, more than the capacity"
                                                                 : "a request this size takes a whole 2.00 MiB segment"));
  }
}

TEST_CASE("an allocation that needs the cache freed succeeds after one retry", "[allocator][oom]") {
  // A block freed while another stream still uses it cannot be given back at once; the retry waits for
  // the stream's events, frees the block and tries again.
  auto streams = std::make_shared<ManualStreams>();
  CachingAllocator a(simulated(64 * MiB), {}, streams);
  void* p = a.allocate(48 * MiB, 1);
  a.record_stream(p, 2);
  a.deallocate(p);
  void* q = a.allocate(60 * MiB, 3);  // another stream's pool: needs p's pages back
  const DeviceStats s = a.stats();
  CHECK(s.num_alloc_retries == 1);
  CHECK(s.num_sync_all_streams == 1);
  CHECK(s.num_ooms == 0);
  CHECK(s.num_device_unmap >= 1);
  a.deallocate(q);
  a.check_invariants();
}

TEST_CASE("empty_cache gives back every free segment and page", "[allocator][empty_cache]") {
  for (bool expandable : {true, false}) {
    AllocatorConfig c;
    c.expandable_segments = expandable;
    auto src = simulated();
    CachingAllocator a(src, c);
    std::vector<void*> ps;
    for (int i = 0; i < 20; ++i) ps.push_back(a.allocate(std::size_t(i + 1) * 700 * KiB));
    void* keep = ps[7];
    for (void* p : ps)
      if (p != keep) a.deallocate(p);
    a.empty_cache();
    const DeviceStats s = a.stats();
    CHECK(s.reserved_bytes.current > 0);  // the kept block's memory stays
    CHECK(s.reserved_bytes.current <= std::int64_t(expandable ? 8 * MiB : 20 * MiB));
    a.check_invariants();
    a.deallocate(keep);
    a.empty_cache();
    CHECK(a.stats().reserved_bytes.current == 0);
    CHECK(src->counters().backed_bytes == 0);
    a.check_invariants();
  }
}

TEST_CASE("garbage collection gives back old free blocks under the cap", "[allocator][gc]") {
  for (bool expandable : {true, false}) {
    AllocatorConfig c;
    c.expandable_segments = expandable;
    c.capacity = 256 * MiB;
    c.gc_threshold = 0.5;
    c.gc_min_age = 10;
    CachingAllocator a(simulated(), c);
    // Many distinct sizes, each freed at once: without GC the cache would keep growing.
    for (int round = 0; round < 40; ++round) {
      void* p = a.allocate(std::size_t(round % 20 + 1) * 5 * MiB + 12345);
      a.deallocate(p);
      for (int k = 0; k < 12; ++k) a.deallocate(a.allocate(512));  // ages the cache
    }
    const DeviceStats s = a.stats();
    CHECK(s.reserved_bytes.current <= std::int64_t(128 * MiB + 101 * MiB));
    CHECK(s.num_gc_releases > 0);
    CHECK(s.num_ooms == 0);
    a.check_invariants();
  }
}

TEST_CASE("lazy release keeps reserved bytes near the high-water mark", "[allocator][release]") {
  CachingAllocator a(simulated());
  // Alternate two phases that need different shapes: free space of one phase cannot serve the other
  // without giving pages back.
  std::vector<void*> ps;
  for (int it = 0; it < 5; ++it) {
    for (int i = 0; i < 16; ++i) ps.push_back(a.allocate(std::size_t(it % 2 ? 24 : 20) * MiB + 4096));
    for (void* p : ps) a.deallocate(p);
    ps.clear();
  }
  const DeviceStats s = a.stats();
  const double ratio = double(s.reserved_bytes.peak) / double(s.allocated_bytes.peak);
  CHECK(ratio <= 1.0 + a.config().release_slack + double(a.config().release_floor + 4 * MiB) / double(s.allocated_bytes.peak));
  a.check_invariants();
}

TEST_CASE("under a cap a request takes a free block of the other size class before failing", "[allocator][oom]") {
  // See Note [Last resort: the other size class]: two 2 MiB pages fit under the cap, one per pool.
  CachingAllocator a(simulated(4 * MiB), {});
  std::vector<void*> small;
  for (int i = 0; i < 4; ++i) small.push_back(a.allocate(512 * KiB));  // the small pool's page, full
  void* large = a.allocate(1536 * KiB);                                  // the large pool's page
  for (int i = 1; i < 4; ++i) a.deallocate(small[i]);                    // 1.5 MiB free, in a shared page
  CHECK(a.stats().reserved_bytes.current == std::int64_t(4 * MiB));
  void* p = a.allocate(1280 * KiB);  // large class; its pool has 0.5 MiB free and no page to grow by
  const DeviceStats s = a.stats();
  CHECK(s.num_ooms == 0);
  CHECK(s.num_cross_class_allocs == 1);
  CHECK(s.reserved_bytes.peak <= std::int64_t(4 * MiB));
  a.check_invariants();
  a.deallocate(p);  // back to the small pool it came from
  a.check_invariants();
  void* q = a.allocate(1280 * KiB);  // and the same again works
  a.deallocate(q);
  a.deallocate(large);
  a.deallocate(small[0]);
  a.check_invariants();
}

TEST_CASE("under a cap map-ahead never makes a request fail whose own pages fit", "[allocator][oom]") {
  // See Note [Feasibility is monotonic in the cap]: the second request needs one more page (6 MiB in all,
  // under the 7 MiB cap), but map-ahead would add a page of the budget's headroom (3% of the high
  // water plus a page), 8 MiB, and no free page is left to give back for it.
  Recorder rec;
  CachingAllocator a(simulated(7 * MiB), {});
  a.add_observer(&rec);
  void* x = a.allocate(3 * MiB - 4 * KiB);
  CHECK(a.stats().reserved_bytes.current == std::int64_t(4 * MiB));
  void* y = a.allocate(3 * MiB - 4 * KiB);  // starts in x's last page, needs the next one
  const DeviceStats s = a.stats();
  CHECK(s.num_ooms == 0);
  CHECK(s.reserved_bytes.current == std::int64_t(6 * MiB));
  CHECK(rec.count(EventKind::SegmentMap) == 2);
  a.check_invariants();
  a.deallocate(y);
  a.deallocate(x);
  a.check_invariants();
  // Uncapped, the same growth maps ahead (what the last try gives up only under the cap).
  CachingAllocator u(simulated(), {});
  void* ux = u.allocate(3 * MiB - 4 * KiB);
  void* uy = u.allocate(3 * MiB - 4 * KiB);
  CHECK(u.stats().reserved_bytes.current == std::int64_t(8 * MiB));
  u.deallocate(uy);
  u.deallocate(ux);
}
