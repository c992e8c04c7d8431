// Expandable segments (Note [Virtual reservations] in trace/include/memcomm/trace/virtual_reservations.hpp):
// reserved counts mapped (device-backed) bytes, not the virtual reservation, in the allocator
// state, in the derived memory curves, and for a trace written as memcomm's allocator emits it.
#include "memcomm_test.hpp"

#include <memcomm/view/allocator_state.hpp>
#include <memcomm/view/builder.hpp>
#include <memcomm/view/loader.hpp>

#include <memcomm/trace/trace_writer.hpp>

#include <string>
#include <vector>

using namespace memcomm::view;
using memcomm::prof::EventKind;

namespace {
constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kVirtual = 128ull << 30;  // the reservation the issue saw shown as reserved
constexpr std::uint64_t kBase = 0x7f0000000000ull;
}  // namespace

TEST_CASE("an expandable segment counts its mapped bytes as reserved and its reservation as virtual", "[unit][viewer]") {
  AllocatorState s;
  s.apply({0, kBase, kVirtual, 0, EventKind::SegmentAlloc, 0, memcomm::prof::kSegmentVirtualRange});
  CHECK(s.reserved == 0);
  CHECK(s.virtual_reserved == kVirtual);
  s.apply({1, kBase, 2 * kMiB, 0, EventKind::SegmentMap});
  s.apply({2, kBase + 2 * kMiB, 2 * kMiB, 0, EventKind::SegmentMap});
  CHECK(s.reserved == 4 * kMiB);
  REQUIRE(s.segments.size() == 1);
  CHECK(s.segments[0].mapped.size() == 1);  // touching maps coalesce
  s.apply({3, kBase, 3 * kMiB, 0, EventKind::Alloc});
  CHECK(s.allocated == 3 * kMiB);
  CHECK(s.largest_free() == 1 * kMiB);  // only mapped space is free space
  CHECK(s.segments[0].extent_end() == kBase + 4 * kMiB);
  s.apply({4, kBase + 2 * kMiB, 2 * kMiB, 0, EventKind::SegmentUnmap});
  CHECK(s.reserved == 2 * kMiB);
  CHECK(s.segments[0].mapped_bytes == 2 * kMiB);
  s.apply({5, kBase + 2 * kMiB, 2 * kMiB, 0, EventKind::SegmentUnmap});  // not mapped any more
  CHECK(s.unmatched == 1);
  CHECK(s.reserved == 2 * kMiB);
  s.apply({6, kBase, 3 * kMiB, 0, EventKind::FreeCompleted});
  s.apply({7, kBase, 2 * kMiB, 0, EventKind::SegmentUnmap});
  s.apply({8, kBase, kVirtual, 0, EventKind::SegmentFree});
  CHECK(s.reserved == 0);
  CHECK(s.virtual_reserved == 0);
  CHECK(s.segments.empty());
}

TEST_CASE("a segment turns expandable at its first map and maps alone make implicit segments", "[unit][viewer]") {
  AllocatorState s;
  s.apply({0, kBase, kVirtual, 0, EventKind::SegmentAlloc});  // unmarked: counted as backed...
  CHECK(s.reserved == kVirtual);
  s.apply({1, kBase, 2 * kMiB, 0, EventKind::SegmentMap});  // ...until a map shows what it is
  CHECK(s.reserved == 2 * kMiB);
  CHECK(s.virtual_reserved == kVirtual);
  // PyTorch snapshots record segment_map without a reservation: adjacent maps grow one segment.
  AllocatorState t;
  t.apply({0, kBase, 2 * kMiB, 0, EventKind::SegmentMap});
  t.apply({1, kBase + 2 * kMiB, 2 * kMiB, 0, EventKind::SegmentMap});
  t.apply({2, kBase + kMiB, 2 * kMiB, 0, EventKind::Alloc});  // spans both maps
  CHECK(t.segments.size() == 1);
  CHECK(t.reserved == 4 * kMiB);
  CHECK(t.allocated == 2 * kMiB);
  CHECK(t.unmatched == 0);
}

TEST_CASE("derived memory curves show an expandable segment's mapped bytes as reserved", "[unit][viewer]") {
  TimelineBuilder b;
  // As memcomm's allocator emits them (allocator/core/growth.cpp): reserve, then map as it grows.
  b.alloc_event(0, {0, kBase, kVirtual, 0, EventKind::SegmentAlloc});
  b.alloc_event(0, {10, kBase, 2 * kMiB, 0, EventKind::SegmentMap});
  b.alloc_event(0, {20, kBase, kMiB, 0, EventKind::Alloc});
  b.alloc_event(0, {30, kBase + 2 * kMiB, 4 * kMiB, 0, EventKind::SegmentMap});
  b.alloc_event(0, {40, kBase + 2 * kMiB, 4 * kMiB, 0, EventKind::Alloc});
  b.alloc_event(0, {50, kBase + 2 * kMiB, 4 * kMiB, 0, EventKind::FreeCompleted});
  b.alloc_event(0, {60, kBase + 2 * kMiB, 4 * kMiB, 0, EventKind::SegmentUnmap});
  const Timeline tl = b.finish("expandable");
  const RankData& rd = tl.ranks.at(0);
  CHECK((rd.alloc_events.front().flags & memcomm::prof::kSegmentVirtualRange) != 0);
  const CounterSeries* reserved = rd.counter("reserved");
  REQUIRE(reserved != nullptr);
  CHECK(reserved->global_max() == static_cast<double>(6 * kMiB));  // never the 128 GiB reservation
  double v = 0;
  CHECK((reserved->value_at(5, v) && v == 0));
  CHECK((reserved->value_at(35, v) && v == static_cast<double>(6 * kMiB)));
  CHECK((reserved->value_at(65, v) && v == static_cast<double>(2 * kMiB)));
  AllocatorTimeline at(&rd.alloc_events);
  CHECK(at.seek(45).reserved == 6 * kMiB);
  CHECK(at.seek(45).virtual_reserved == kVirtual);
}

namespace prof = memcomm::prof;
namespace {
prof::Event mem(prof::EventKind k, std::int64_t t, std::uint64_t addr, std::uint64_t size) {
  return prof::Event::from(prof::make_mem_block(k, t, addr, size));
}
// `events` written as one chunk of a trace file `name`, loaded back as the viewer loads files.
Timeline load_events(const std::string& name, const std::vector<prof::Event>& events) {
  const std::string path = memcomm::test::temp_path("memcomm_viewer_tests", name);
  {
    prof::TraceWriter w(path, prof::WriterOptions{});
    w.write_chunk({}, events, 0);
    w.close();
  }
  Timeline tl;
  std::string error;
  REQUIRE(load_file(path, tl, error));
  REQUIRE(tl.ranks.size() == 1);
  return tl;
}
}  // namespace

TEST_CASE("a trace with segment_map/unmap events loads with mapped bytes as reserved", "[unit][viewer]") {
  using K = prof::EventKind;
  const Timeline tl = load_events("expandable.mct", {mem(K::SegmentAlloc, 100, kBase, kVirtual),
                                                      mem(K::SegmentMap, 110, kBase, 20 * kMiB),
                                                      mem(K::Alloc, 120, kBase, 8 * kMiB),
                                                      mem(K::SegmentMap, 130, kBase + 20 * kMiB, 20 * kMiB),
                                                      mem(K::SegmentUnmap, 140, kBase + 20 * kMiB, 20 * kMiB)});
  const RankData& rd = tl.ranks[0];
  REQUIRE(rd.alloc_events.size() == 5);
  CHECK(rd.alloc_events[1].op == EventKind::SegmentMap);
  CHECK(rd.alloc_events[4].op == EventKind::SegmentUnmap);
  REQUIRE(rd.counter("reserved") != nullptr);
  CHECK(rd.counter("reserved")->global_max() == static_cast<double>(40 * kMiB));
  AllocatorTimeline at(&rd.alloc_events);
  CHECK(at.seek(200).reserved == 20 * kMiB);
  CHECK(at.seek(200).virtual_reserved == kVirtual);
  CHECK(at.seek(200).allocated == 8 * kMiB);
}
TEST_CASE("a reservation the trace flags as virtual counts for nothing even when never mapped", "[unit][viewer]") {
  auto reservation = prof::make_mem_block(prof::EventKind::SegmentAlloc, 100, kBase, kVirtual);
  reservation.category = prof::kSegmentVirtualRange;  // as memcomm's trainer writes it
  const std::uint64_t plain = 0x10000000ull;
  const Timeline tl = load_events("virtual_flag.mct", {prof::Event::from(reservation),
                                                        mem(prof::EventKind::SegmentAlloc, 110, plain, 20 * kMiB),
                                                        mem(prof::EventKind::Alloc, 120, plain, 8 * kMiB)});
  const RankData& rd = tl.ranks[0];
  REQUIRE(rd.alloc_events.size() == 3);
  CHECK((rd.alloc_events[0].flags & memcomm::prof::kSegmentVirtualRange) != 0);
  CHECK(rd.alloc_events[0].category == 0);  // the flag is not a block category
  AllocatorTimeline at(&rd.alloc_events);
  CHECK(at.seek(200).reserved == 20 * kMiB);
  CHECK(at.seek(200).virtual_reserved == kVirtual);
  REQUIRE(rd.counter("reserved") != nullptr);
  CHECK(rd.counter("reserved")->global_max() == static_cast<double>(20 * kMiB));
}
