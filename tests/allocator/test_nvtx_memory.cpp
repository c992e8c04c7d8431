// See Note [NVTX memory regions]: the observer follows segments through an engine's life. Without a
// tool attached the NVTX calls return at once; what is checked is the observer's own bookkeeping and
// that every kind of event passes through it safely.
#include "allocator_test_util.hpp"

#include "memcomm/allocator/nvtx_memory.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

TEST_CASE("the NVTX memory observer registers a heap per segment and a region per live block", "[allocator][nvtx]") {
  for (bool expandable : {true, false}) {
    AllocatorConfig c;
    c.expandable_segments = expandable;
    NvtxMemoryObserver nvtx;
    CachingAllocator a(simulated(256 * MiB), c);
    a.add_observer(&nvtx);
    std::vector<void*> live;
    for (int i = 0; i < 20; ++i) live.push_back(a.allocate((i % 5 + 1) * 3 * MiB + 100));
    live.push_back(a.allocate(4 * KiB));  // the small pool: a second heap
    CHECK(nvtx.heaps() >= 2);
    CHECK(nvtx.regions() == live.size());
    for (void* p : live) a.deallocate(p);
    CHECK(nvtx.regions() == 0);
    a.empty_cache();
    a.remove_observer(&nvtx);
    // Whole segments go back to the source; expandable reservations stay (their pages are unmapped).
    if (!expandable) CHECK(nvtx.heaps() == 0);
    a.check_invariants();
  }
}

TEST_CASE("blocks allocated before the NVTX observer subscribed are not unregistered", "[allocator][nvtx]") {
  CachingAllocator a(simulated(64 * MiB), {});
  void* before = a.allocate(3 * MiB);  // its segment and block predate the observer
  NvtxMemoryObserver nvtx;
  a.add_observer(&nvtx);
  void* after = a.allocate(3 * MiB);
  CHECK(nvtx.regions() == 0);  // its heap (segment) was never seen: nothing to attach the region to
  a.deallocate(before);
  a.deallocate(after);
  CHECK(nvtx.regions() == 0);
  a.remove_observer(&nvtx);
}
