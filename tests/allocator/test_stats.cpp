// Statistics and observers.
#include "allocator_test_util.hpp"

#include <map>

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

TEST_CASE("statistics follow PyTorch's DeviceStats meanings", "[allocator][stats]") {
  CachingAllocator a(simulated());
  void* p = a.allocate(1000);     // 1024 after rounding
  void* q = a.allocate(3 * MiB);  // large pool
  DeviceStats s = a.stats();
  CHECK(s.allocation.current == 2);
  CHECK(s.allocated_bytes.current == std::int64_t(1024 + 3 * MiB));
  CHECK(s.requested_bytes.current == std::int64_t(1000 + 3 * MiB));
  CHECK(s.active_bytes.current == s.allocated_bytes.current);
  CHECK(s.reserved_bytes.current >= s.allocated_bytes.current);
  CHECK(s.segment.current == 2);  // one expandable segment per pool
  a.deallocate(p);
  s = a.stats();
  CHECK(s.allocation.current == 1);
  CHECK(s.allocation.peak == 2);
  CHECK(s.allocation.allocated == 2);
  CHECK(s.allocation.freed == 1);
  CHECK(s.allocated_bytes.peak == std::int64_t(1024 + 3 * MiB));
  CHECK(s.requested_bytes.freed == 1000);
  a.reset_peak_stats();
  s = a.stats();
  CHECK(s.allocated_bytes.peak == std::int64_t(3 * MiB));
  CHECK(s.allocation.peak == 1);
  CHECK(s.allocation.allocated == 2);  // totals survive a peak reset
  a.deallocate(q);
  const MemorySummary m = a.memory_summary();
  CHECK(m.internal_waste == 0);
  CHECK(m.free_bytes == std::uint64_t(a.stats().reserved_bytes.current));
  CHECK(m.largest_free_block <= m.free_bytes);
  CHECK(m.external_fragmentation() >= 0.0);
  CHECK(m.external_fragmentation() < 1.0);
  CHECK(s.fragmentation() >= 0.0);
}

TEST_CASE("fragmentation figures", "[allocator][stats]") {
  DeviceStats s;
  s.allocated_bytes.increase(90);
  s.reserved_bytes.increase(100);
  CHECK(s.fragmentation() == Approx(0.1));
  MemorySummary m;
  m.free_bytes = 100;
  m.largest_free_block = 25;
  CHECK(m.external_fragmentation() == Approx(0.75));
  CHECK(MemorySummary{}.external_fragmentation() == 0.0);
  CHECK(DeviceStats{}.fragmentation() == 0.0);
}

TEST_CASE("observers see every event, in agreement with the stats", "[allocator][observers]") {
  auto streams = std::make_shared<ManualStreams>();
  AllocatorConfig c;
  c.capacity = 256 * MiB;
  CachingAllocator a(simulated(), c, streams);
  Recorder rec;
  a.add_observer(&rec);
  std::vector<void*> ps;
  for (int i = 0; i < 50; ++i) ps.push_back(a.allocate(std::size_t(i % 7 + 1) * 700 * KiB + 3));
  a.record_stream(ps[3], 9);
  for (void* p : ps) a.deallocate(p);
  CHECK_THROWS_AS(a.allocate(300 * MiB), OutOfMemory);
  streams->complete_all();
  a.empty_cache();
  const DeviceStats s = a.stats();
  CHECK(rec.count(EventKind::Alloc) == std::size_t(s.allocation.allocated));
  CHECK(rec.count(EventKind::FreeRequested) == std::size_t(s.allocation.freed));
  CHECK(rec.count(EventKind::FreeCompleted) == 50);
  CHECK(rec.count(EventKind::SegmentMap) == std::size_t(s.num_device_map));
  CHECK(rec.count(EventKind::SegmentUnmap) == std::size_t(s.num_device_unmap));
  CHECK(rec.count(EventKind::SegmentAlloc) == std::size_t(s.segment.allocated));
  CHECK(rec.count(EventKind::Oom) == 1);
  // Timestamps are monotonic, and events carry the request.
  for (std::size_t i = 1; i < rec.events.size(); ++i) CHECK(rec.events[i].time_ns >= rec.events[i - 1].time_ns);
  const AllocEvent& first = rec.events[0];
  CHECK(first.kind == EventKind::SegmentAlloc);
  bool found = false;
  for (const AllocEvent& e : rec.events)
    if (e.kind == EventKind::Alloc) {
      CHECK(e.requested == 700 * KiB + 3);
      CHECK(e.size == 700 * KiB + 512);
      CHECK(e.device == 0);
      found = true;
      break;
    }
  CHECK(found);
  a.remove_observer(&rec);
  const std::size_t n = rec.events.size();
  a.deallocate(a.allocate(100));
  CHECK(rec.events.size() == n);
  CHECK(std::string(memcomm::prof::kind_name(EventKind::SegmentUnmap)) == "segment_unmap");
}

TEST_CASE("a virtual reservation is flagged, a whole segment is not", "[allocator][observers]") {
  // Consumers count an expandable segment's maps, not its range, as reserved bytes; the flag lets
  // them do so even for a range no map ever lands in (Note [Virtual reservations] in the profiler).
  for (const bool expandable : {true, false}) {
    AllocatorConfig c;
    c.capacity = 256 * MiB;
    c.expandable_segments = expandable;
    CachingAllocator a(simulated(), c);
    Recorder rec;
    a.add_observer(&rec);
    a.deallocate(a.allocate(3 * MiB));
    std::size_t segments = 0;
    for (const AllocEvent& e : rec.events) {
      if (e.kind == EventKind::SegmentAlloc) {
        ++segments;
        CHECK(bool(e.flags & memcomm::prof::kSegmentVirtualRange) == expandable);
      } else {
        CHECK(e.flags == 0);
      }
    }
    CHECK(segments == 1);
    a.remove_observer(&rec);
  }
}

namespace {
// What a stream of events says the allocator holds: live blocks (address -> size) and backed bytes.
struct Folded {
  std::map<std::uint64_t, std::uint64_t> live;
  std::uint64_t backed = 0;
  explicit Folded(const std::vector<AllocEvent>& events) {
    for (const AllocEvent& e : events) {
      const bool virtual_range = e.flags & memcomm::prof::kSegmentVirtualRange;
      switch (e.kind) {
        case EventKind::Alloc: live[e.address] = e.size; break;
        case EventKind::FreeCompleted: live.erase(e.address); break;
        case EventKind::SegmentAlloc: backed += virtual_range ? 0 : e.size; break;
        case EventKind::SegmentFree: backed -= virtual_range ? 0 : e.size; break;
        case EventKind::SegmentMap: backed += e.size; break;
        case EventKind::SegmentUnmap: backed -= e.size; break;
        default: break;
      }
    }
  }
};
}  // namespace

TEST_CASE("an observer added mid-run is first sent the state, and then agrees with one there from the start",
          "[allocator][observers]") {
  // See Note [An observer added mid-run]: a profile started after the model and data exist.
  for (const bool expandable : {true, false}) {
    INFO("expandable " << expandable);
    auto streams = std::make_shared<ManualStreams>();
    AllocatorConfig c;
    c.capacity = 512 * MiB;
    c.expandable_segments = expandable;
    CachingAllocator a(simulated(), c, streams);
    Recorder all, late;
    a.add_observer(&all);
    std::vector<void*> ps;
    for (int i = 0; i < 40; ++i) ps.push_back(a.allocate(std::size_t(i % 5 + 1) * 900 * KiB + 7));
    for (int i = 0; i < 40; i += 3) a.deallocate(ps[i]), ps[i] = nullptr;  // holes, some pages given back
    a.record_stream(ps[1], 5);
    a.deallocate(ps[1]);  // pending on stream 5 when the late observer comes
    ps[1] = nullptr;
    a.add_observer(&late, /*with_state=*/true);
    CHECK(Folded(late.events).live == Folded(all.events).live);
    CHECK(Folded(late.events).backed == std::uint64_t(a.stats().reserved_bytes.current));
    for (int i = 0; i < 10; ++i) ps.push_back(a.allocate(std::size_t(i + 1) * 3 * MiB));
    streams->complete_all();
    for (std::size_t i = 0; i < ps.size(); i += 2)
      if (ps[i]) a.deallocate(ps[i]), ps[i] = nullptr;
    a.empty_cache();
    const Folded from_start(all.events), from_middle(late.events);
    CHECK(from_middle.live == from_start.live);
    CHECK(from_middle.backed == from_start.backed);
    CHECK(from_middle.backed == std::uint64_t(a.stats().reserved_bytes.current));
    a.remove_observer(&all);
    a.remove_observer(&late);
    for (void* p : ps)
      if (p) a.deallocate(p);
  }
}
