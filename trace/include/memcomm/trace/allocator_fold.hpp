// AllocatorFold: one device's allocator state folded from its block events (Alloc .. SegmentUnmap):
// the live blocks by address, the segments with their mapped ranges, the levels (allocated, active,
// reserved, virtual reserved) and a check that the events seen are the whole story. The one fold of
// memcomm: memcomm-trace report's memory series (memory_series.cpp) and the viewer's curves fold its
// levels, the viewer's allocator view mirrors its segments and blocks through a FoldObserver, and
// memcomm-replay (request_builder.cpp) takes its block ids and its verdicts on frees.
//
// Note [Memory curves from block events]: a memcomm trace carries both the allocator's block events
// (every alloc, free request, free completion and segment change) and the trainer's periodic
// MemSample counters (every ~50 ms). The samples miss whatever rises and falls between two of them
// (on a 2-rank CPU run the trainer's peak allocated was 71313920 B, the fold of the events exactly
// that, the samples' maximum 69919744 B). But the fold is only right when it sees every event from
// the start of the run: a trace that starts mid-run (a viewer time-range load, a late live attach,
// lost early chunks) misses the blocks allocated before it, and a lost event (a DropEvent, a lost
// chunk) throws every later value off. The rule, per rank:
//   - The curves describe one device D: the first GPU with allocated/active/reserved MemSamples,
//     else the host when only it has them; without such samples, likewise of the block events
//     (better_curve_device below). A GPU wins over the host because the host's memory is the
//     side show of a GPU run: a torch.profiler trace's first [memory] event is often a host tensor
//     of the data loader, and its GPU's curve is the one the run is judged by. Block events of other
//     devices (host segments beside GPU ones under CUPTI, ...) are not folded into D's curves.
//   - The fold (AllocatorFold below) is "complete" when the rank dropped no events, the trace
//     covers the run from its start (not a viewer range load that cut events before the range), and
//     no event of D contradicts the fold (Note [Allocator fold rules]: every free refers to a block
//     or segment the fold holds, nothing is allocated twice at one address, nothing is mapped twice
//     or unmapped unmapped, ...). A mid-run trace frees blocks it never saw, a lost chunk leaves frees of blocks it never
//     saw or allocations on addresses still held: both are caught once such an event comes. Not
//     caught: a trace that starts mid-run and never frees anything allocated before its start
//     (parameters, optimizer state, cached segments); its curves sit low by those bytes. memcomm's
//     trainer attaches its observer before the model exists, so its traces do not start mid-run.
//     A torch.profiler trace always does (the profiler attaches to a running process), and each
//     of its [memory] events carries the allocator's totals, so its samples are exact at every
//     block event: a rank tagged kKinetoSourceTag (kineto.hpp) never counts as complete.
//   - allocated and active come from the fold when D has Alloc events, reserved when D has
//     SegmentAlloc/SegmentMap events, each only if the fold is complete or the metric is not
//     sampled at all (then there is nothing better). Otherwise D's samples are the curve.
//   - The fold itself is AllocatorFold below (Note [Allocator fold rules]): one device's blocks and
//     segments, with the rule for every event, shared by the report, the viewer and memcomm-replay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "memcomm/trace/event.hpp"

namespace memcomm::prof {

// See Note [Memory curves from block events]: whether a rank's curves follow `candidate` rather than
// the device chosen so far (`chosen`, -1: none yet): any device over none, a GPU over the host.
inline bool better_curve_device(int chosen, int candidate) {
  return chosen < 0 || (chosen == kHostDevice && candidate != kHostDevice);
}
// The samples that choose the device: allocated, active and reserved (the level curves).
inline bool is_level_metric(MemMetric m) {
  return m == MemMetric::Allocated || m == MemMetric::Active || m == MemMetric::Reserved;
}

// Note [Allocator fold rules]: what each block event does to the fold, and when an event contradicts
// it (the fold then counts a contradiction and is broken() for good; bad or mid-run traces still fold).
//   - Alloc: a block at addr, in the segment that contains addr. No segment contains it (a trace that
//     starts mid-run missed the SegmentAlloc): an implicit segment of the block's size is made, which
//     counts as reserved (the least the device must have held). Contradictions: a live block at addr
//     (its free was lost: the old block ends first, FoldCheck::Replaced), a block past its segment's
//     end (kept: the allocator says it is allocated).
//   - FreeRequested: the block leaves allocated and stays active until its FreeCompleted (a pending
//     free, waiting on stream uses). A device whose events carry no FreeCompleted at all (the
//     Options say so) ends the block here. Sizes of frees are the sizes blocks were allocated with.
//   - FreeCompleted: the block ends (out of active; out of allocated too if no request came first).
//   - Frees of a block the fold does not hold contradict it: FoldCheck::Unknown when the address was
//     never named (allocated before the trace), FoldCheck::Ended when the block at it already ended
//     (freed twice). The fold remembers such addresses, so a second completion is Ended.
//   - SegmentAlloc: a segment; reserved counts it whole, unless it is a virtual reservation (the
//     event's virtual_range: memcomm's flag, or prof::VirtualReservations' guess), whose maps count
//     instead (Note [Virtual reservations]) and whose size counts as virtual reserved. A segment
//     already at addr contradicts (the first is kept).
//   - SegmentMap: backs [addr, addr + size) of the segment containing addr. An unmarked segment turns
//     virtual at its first map (reserved before we knew: now we do). A map with no enclosing segment
//     (PyTorch snapshots record only segment_map) starts an implicit virtual segment, or extends one
//     ending where it begins. Only newly backed bytes count: a range mapped twice, or past its
//     reservation, or a map overlapping the next segment, contradicts.
//   - SegmentUnmap: unbacks the range; bytes that were not mapped contradict.
//   - SegmentFree: the segment at addr ends, with its backed bytes. Live blocks in it contradict (an
//     allocator frees only empty segments) and end with it; a segment the fold does not hold
//     contradicts (FoldCheck::Unknown).
// Levels are 128-bit sums read saturated to [0, 2^64).

enum class FoldCheck : uint8_t {
  Ok,
  Replaced,  // an Alloc at a live block's address: the old block ended first (a lost free)
  Unknown,   // a free of a block or segment the fold never saw (allocated before the trace)
  Ended,     // a free of a block that already ended (freed twice)
  Conflict,  // otherwise inconsistent (Note [Allocator fold rules])
};

enum class BlockLife : uint8_t {
  Allocated,
  PendingFree,  // free requested, not completed (still active)
  Freed,        // ended; the entry is kept for the address's next Alloc (Note [Dead blocks stay in the map])
  Named,        // never allocated in the trace, only named by a free request
};

struct FoldBlock {
  uint64_t size;  // bytes, as allocated
  uint32_t id;    // the fold's serial number of the block (block_ids() so far)
  BlockLife life;
  bool live() const { return life == BlockLife::Allocated || life == BlockLife::PendingFree; }
};

struct AddrRange {
  uint64_t begin, end;  // [begin, end)
};

struct FoldSegment {
  uint64_t addr = 0, size = 0;     // device range (virtual: the reservation)
  bool virtual_range = false;      // only `mapped` is backed (Note [Virtual reservations])
  std::vector<AddrRange> mapped;   // virtual: backed ranges, sorted, disjoint, not touching
  uint64_t mapped_bytes = 0;       // bytes in `mapped`
  uint32_t live_blocks = 0;        // live blocks starting in it
  uint64_t backed() const { return virtual_range ? mapped_bytes : size; }
};

// What a fold tells whoever mirrors its state (the viewer's segments and blocks, replay's requests),
// during AllocatorFold::apply(): every change, in the order it happens. No-ops by default.
class FoldObserver {
 public:
  virtual void segment_added(const FoldSegment&) {}
  virtual void segment_changed(const FoldSegment&) {}  // turned virtual, grown, mapped or unmapped
  virtual void segment_removed(const FoldSegment&) {}  // after its blocks' block_removed
  virtual void block_added(uint64_t /*addr*/, const FoldBlock&) {}
  virtual void block_pending(uint64_t /*addr*/, const FoldBlock&) {}
  virtual void block_removed(uint64_t /*addr*/, const FoldBlock&) {}  // life: as it was before

 protected:
  ~FoldObserver() = default;
};

class AllocatorFold {
 public:
  struct Options {
    bool frees_complete = true;  // the device's events carry FreeCompleted (else FreeRequested ends a block)
    bool keep_freed = false;     // never sweep freed entries (replay: every address ever named is remembered)
  };
  AllocatorFold() = default;
  explicit AllocatorFold(Options o) : opt_(o) {}
  void reset(Options o);
  // Folds one block event of the device (Alloc .. SegmentUnmap; other kinds change nothing).
  // virtual_range: a SegmentAlloc of a reserved virtual range (its maps count, not its size).
  FoldCheck apply(EventKind kind, uint64_t addr, uint64_t size, bool virtual_range = false, FoldObserver* obs = nullptr);
  bool broken() const { return contradictions_ != 0; }
  uint64_t contradictions() const { return contradictions_; }
  const Options& options() const { return opt_; }
  uint64_t allocated() const { return clamp(allocated_); }
  uint64_t active() const { return clamp(active_); }
  uint64_t pending_free() const { return clamp(active_ - allocated_); }
  uint64_t reserved() const { return clamp(reserved_); }
  uint64_t virtual_reserved() const { return clamp(virtual_reserved_); }
  size_t live_blocks() const { return blocks_.size() - dead_; }
  // The entry at addr: a live block, or one the fold remembers (freed or named); null if none.
  const FoldBlock* block(uint64_t addr) const;
  // Block ids handed out so far: Allocs, and take_block_id() for blocks the events never allocated.
  uint32_t block_ids() const { return next_id_; }
  uint32_t take_block_id() { return next_id_++; }
  using SegmentMap = std::map<uint64_t, FoldSegment>;
  const SegmentMap& segments() const { return segments_; }  // by addr
  size_t memory_bytes() const;

 private:
  static uint64_t clamp(__int128 v) { return v <= 0 ? 0 : v > __int128(UINT64_MAX) ? UINT64_MAX : uint64_t(v); }
  using BlockMap = std::unordered_map<uint64_t, FoldBlock>;
  FoldCheck alloc(uint64_t addr, uint64_t size, FoldObserver* obs);
  FoldCheck free_requested(uint64_t addr, FoldObserver* obs);
  FoldCheck free_completed(uint64_t addr, FoldObserver* obs);
  FoldCheck free_unheld(uint64_t addr, bool completed);
  void release(BlockMap::iterator it, FoldObserver* obs);
  void end_block(BlockMap::iterator it, FoldObserver* obs);  // release, then bury
  void bury(FoldBlock& b);  // a freed block; may sweep the dead ones
  // fold_segments.cpp
  FoldSegment* containing(uint64_t addr);  // the segment containing addr, or null
  FoldSegment& add_segment(uint64_t addr, uint64_t size, bool virtual_range, FoldObserver* obs);
  FoldCheck segment_alloc(uint64_t addr, uint64_t size, bool virtual_range, FoldObserver* obs);
  FoldCheck segment_free(uint64_t addr, FoldObserver* obs);
  FoldSegment* segment_to_map(uint64_t addr, uint64_t size, FoldObserver* obs);
  FoldCheck map(uint64_t addr, uint64_t size, FoldObserver* obs);
  FoldCheck unmap(uint64_t addr, uint64_t size, FoldObserver* obs);
  void end_blocks_in(const FoldSegment& s, FoldObserver* obs);

  Options opt_;
  BlockMap blocks_;                  // blocks by address, live and dead
  size_t dead_ = 0;                  // dead entries in blocks_
  uint32_t next_id_ = 0;
  SegmentMap segments_;
  // The last segment found: most blocks land in the one before. A copy of the fold starts without.
  struct SegmentHint {
    FoldSegment* at = nullptr;
    SegmentHint() = default;
    SegmentHint(const SegmentHint&) {}
    SegmentHint& operator=(const SegmentHint&) {
      at = nullptr;
      return *this;
    }
  } hint_;
  __int128 allocated_ = 0, active_ = 0, reserved_ = 0, virtual_reserved_ = 0;
  uint64_t contradictions_ = 0;
};

}  // namespace memcomm::prof
