// The one allocator-state fold (Note [Allocator fold rules] in trace/ allocator_fold.hpp): its rule
// for each event, its verdicts on events that contradict it, and the changes it tells an observer.
#include "memcomm_test.hpp"

#include <string>
#include <vector>

#include "memcomm/trace/allocator_fold.hpp"

using namespace memcomm::prof;

namespace {

// Writes down every change, in order.
struct Log final : FoldObserver {
  std::vector<std::string> lines;
  void segment_added(const FoldSegment& s) override { lines.push_back("seg+ " + std::to_string(s.addr)); }
  void segment_changed(const FoldSegment& s) override { lines.push_back("seg~ " + std::to_string(s.addr)); }
  void segment_removed(const FoldSegment& s) override { lines.push_back("seg- " + std::to_string(s.addr)); }
  void block_added(uint64_t a, const FoldBlock& b) override { lines.push_back("blk+ " + std::to_string(a) + " #" + std::to_string(b.id)); }
  void block_pending(uint64_t a, const FoldBlock&) override { lines.push_back("blk? " + std::to_string(a)); }
  void block_removed(uint64_t a, const FoldBlock& b) override { lines.push_back("blk- " + std::to_string(a) + " #" + std::to_string(b.id)); }
};

}  // namespace

TEST_CASE("allocator fold: blocks, pending frees and segments move the levels", "[profiler][fold]") {
  AllocatorFold f;
  Log log;
  CHECK(f.apply(EventKind::SegmentAlloc, 1000, 1000, false, &log) == FoldCheck::Ok);
  CHECK(f.apply(EventKind::Alloc, 1000, 100, false, &log) == FoldCheck::Ok);
  CHECK(f.apply(EventKind::Alloc, 1100, 200, false, &log) == FoldCheck::Ok);
  CHECK(f.apply(EventKind::FreeRequested, 1100, 0, false, &log) == FoldCheck::Ok);
  CHECK(f.allocated() == 100);
  CHECK(f.active() == 300);
  CHECK(f.pending_free() == 200);
  CHECK(f.reserved() == 1000);
  CHECK(f.apply(EventKind::FreeCompleted, 1100, 0, false, &log) == FoldCheck::Ok);
  CHECK(f.active() == 100);
  CHECK(f.live_blocks() == 1);
  CHECK(f.segments().at(1000).live_blocks == 1);
  CHECK(log.lines == std::vector<std::string>{"seg+ 1000", "blk+ 1000 #0", "blk+ 1100 #1", "blk? 1100", "blk- 1100 #1"});
  CHECK_FALSE(f.broken());
}

TEST_CASE("allocator fold: a device without completions ends blocks at the request", "[profiler][fold]") {
  AllocatorFold f({false, false});
  f.apply(EventKind::Alloc, 1000, 100);
  f.apply(EventKind::FreeRequested, 1000, 0);
  CHECK(f.allocated() == 0);
  CHECK(f.active() == 0);
  CHECK(f.live_blocks() == 0);
  CHECK_FALSE(f.broken());
}

TEST_CASE("allocator fold: contradictions are named, and the state stays usable", "[profiler][fold]") {
  AllocatorFold f({true, true});
  Log log;
  f.apply(EventKind::SegmentAlloc, 1000, 1000);
  f.apply(EventKind::Alloc, 1000, 100, false, &log);
  // A lost free: the old block ends first.
  CHECK(f.apply(EventKind::Alloc, 1000, 50, false, &log) == FoldCheck::Replaced);
  CHECK(log.lines == std::vector<std::string>{"blk+ 1000 #0", "blk- 1000 #0", "blk+ 1000 #1"});
  CHECK(f.allocated() == 50);
  // A block allocated before the trace, then one freed twice.
  CHECK(f.apply(EventKind::FreeRequested, 5000, 0) == FoldCheck::Unknown);
  CHECK(f.apply(EventKind::FreeCompleted, 5000, 0) == FoldCheck::Unknown);
  CHECK(f.apply(EventKind::FreeCompleted, 5000, 0) == FoldCheck::Ended);
  CHECK(f.apply(EventKind::FreeCompleted, 1000, 0) == FoldCheck::Ok);
  CHECK(f.apply(EventKind::FreeCompleted, 1000, 0) == FoldCheck::Ended);
  CHECK(f.block(5000) != nullptr);  // remembered (keep_freed)
  CHECK_FALSE(f.block(5000)->live());
  // A block past its segment's end is kept; a segment allocated twice keeps the first.
  CHECK(f.apply(EventKind::Alloc, 1900, 200) == FoldCheck::Conflict);
  CHECK(f.allocated() == 200);
  CHECK(f.apply(EventKind::SegmentAlloc, 1000, 4000) == FoldCheck::Conflict);
  CHECK(f.reserved() == 1000);
  // A segment freed with a live block: the block ends with it.
  CHECK(f.apply(EventKind::SegmentFree, 1000, 1000) == FoldCheck::Conflict);
  CHECK(f.allocated() == 0);
  CHECK(f.reserved() == 0);
  CHECK(f.apply(EventKind::SegmentFree, 1000, 1000) == FoldCheck::Unknown);
  CHECK(f.contradictions() == 9);
}

TEST_CASE("allocator fold: virtual reservations count their maps, and blocks and maps without a segment make one", "[profiler][fold]") {
  constexpr uint64_t k1 = 1;
  AllocatorFold f;
  f.apply(EventKind::SegmentAlloc, k1 << 20, k1 << 30, true);  // flagged virtual
  CHECK(f.reserved() == 0);
  CHECK(f.virtual_reserved() == k1 << 30);
  CHECK(f.apply(EventKind::SegmentMap, k1 << 20, 8192) == FoldCheck::Ok);
  CHECK(f.apply(EventKind::SegmentMap, k1 << 20, 4096) == FoldCheck::Conflict);  // mapped twice: counted once
  CHECK(f.reserved() == 8192);
  CHECK(f.apply(EventKind::SegmentUnmap, (k1 << 20) + 4096, 4096) == FoldCheck::Ok);
  CHECK(f.reserved() == 4096);
  // An unmarked segment turns virtual at its first map.
  f.apply(EventKind::SegmentAlloc, k1 << 31, k1 << 20);
  CHECK(f.reserved() == 4096 + (k1 << 20));
  f.apply(EventKind::SegmentMap, k1 << 31, 4096);
  CHECK(f.reserved() == 2 * 4096);
  // Maps alone (PyTorch snapshots) make an implicit virtual segment, extended by the next map.
  f.apply(EventKind::SegmentMap, k1 << 33, 4096);
  f.apply(EventKind::SegmentMap, (k1 << 33) + 4096, 4096);
  CHECK(f.segments().at(k1 << 33).size == 8192);
  CHECK(f.reserved() == 4 * 4096);
  // A block with no segment: an implicit one of its size, counted as reserved.
  f.apply(EventKind::Alloc, k1 << 35, 512);
  CHECK(f.reserved() == 4 * 4096 + 512);
  // Freeing a reservation drops its backed bytes with it.
  f.apply(EventKind::SegmentFree, k1 << 20, k1 << 30, true);
  CHECK(f.reserved() == 3 * 4096 + 512);
  CHECK(f.broken());  // the double map above
}
