// The memory levels (allocated, active, reserved) of one device folded from the allocator's block
// events, with a check that the events seen are the whole story. Shared by memcomm-trace report
// (memory_series.cpp) and the viewer (alloc_derive.cpp), so both follow one rule.
//
// Note [Memory curves from block events]: a memcomm trace carries both the allocator's block events
// (every alloc, free request, free completion and segment change) and the trainer's periodic
// MemSample counters (every ~50 ms). The samples miss whatever rises and falls between two of them
// (on a 2-rank CPU run the trainer's peak allocated was 71313920 B, the fold of the events exactly
// that, the samples' maximum 69919744 B). But the fold is only right when it sees every event from
// the start of the run: a trace that starts mid-run (a viewer time-range load, a late live attach,
// lost early chunks) misses the blocks allocated before it, and a lost event (a DropEvent, a lost
// chunk) throws every later value off. The rule, per rank:
//   - The curves describe one device D: the device of the rank's first allocated/active/reserved
//     MemSample, or without such samples, of its first block event. Block events of other devices
//     (host segments beside GPU ones under CUPTI, ...) are not folded into D's curves.
//   - The fold (MemoryFold below) is "complete" when the rank dropped no events, the trace covers
//     the run from its start (not a viewer range load that cut events before the range), and no
//     event of D contradicts the fold: every free/completion/segment free refers to a block/segment
//     the fold holds, no block or segment is allocated twice at one address, unmaps never exceed
//     maps. A mid-run trace frees blocks it never saw, a lost chunk leaves frees of blocks it never
//     saw or allocations on addresses still held: both are caught once such an event comes. Not
//     caught: a trace that starts mid-run and never frees anything allocated before its start
//     (parameters, optimizer state, cached segments); its curves sit low by those bytes. memcomm's
//     trainer attaches its observer before the model exists, so its traces do not start mid-run.
//   - allocated and active come from the fold when D has Alloc events, reserved when D has
//     SegmentAlloc/SegmentMap events, each only if the fold is complete or the metric is not
//     sampled at all (then there is nothing better). Otherwise D's samples are the curve.
//   - Fold: Alloc adds to allocated and active; FreeRequested moves the block out of allocated (to
//     pending: still active); FreeCompleted ends it (out of active; out of allocated too if no
//     request came first). A device whose events carry no FreeCompleted at all (producers that
//     never complete) ends blocks at FreeRequested. Sizes of frees are the sizes the block was
//     allocated with. SegmentAlloc adds to reserved unless it is a virtual range (Note [Virtual
//     reservations] in memory_series.cpp, VirtualReservations below), whose SegmentMap/SegmentUnmap
//     count instead; SegmentFree removes what its SegmentAlloc added. Sums are 128-bit, read saturated to [0, 2^64).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "memcomm/trace/event.hpp"

namespace memcomm::prof {

class MemoryFold {
 public:
  // frees_complete: the device's events carry FreeCompleted (else FreeRequested ends a block).
  explicit MemoryFold(bool frees_complete = true) : frees_complete_(frees_complete) {}
  void reset(bool frees_complete);
  // Folds one block event of the device (Alloc .. SegmentUnmap; other kinds change nothing).
  // virtual_range: a SegmentAlloc of a reserved virtual range (its maps count, not its size).
  // Returns false when the event contradicts what was folded; the fold is then broken() for good
  // (the levels still move, saturated, for callers with no samples).
  bool apply(EventKind kind, uint64_t addr, uint64_t size, bool virtual_range = false);
  bool broken() const { return broken_; }
  bool frees_complete() const { return frees_complete_; }
  uint64_t allocated() const { return clamp(allocated_); }
  uint64_t active() const { return clamp(active_); }
  uint64_t reserved() const { return clamp(reserved_); }

 private:
  static uint64_t clamp(__int128 v) { return v <= 0 ? 0 : v > __int128(UINT64_MAX) ? UINT64_MAX : uint64_t(v); }
  struct Block {
    uint64_t size;
    bool pending;  // free requested, not completed
    bool live;     // false: freed, kept for the address's next Alloc (Note [Dead blocks stay in the map])
  };
  void bury(Block& b);  // a freed block; may sweep the dead ones
  struct Segment {
    uint64_t size;
    bool virtual_range;
  };
  std::unordered_map<uint64_t, Block> blocks_;      // blocks by address, live and dead
  size_t dead_ = 0;                                 // dead entries in blocks_
  std::unordered_map<uint64_t, Segment> segments_;  // live segments by address
  __int128 allocated_ = 0, active_ = 0, reserved_ = 0, mapped_ = 0;
  bool frees_complete_ = true;
  bool broken_ = false;
};

// Which SegmentAlloc/SegmentFree events are virtual reservations or their releases (Note [Virtual
// reservations] in memory_series.cpp): the producer's flag, else the guess that a SegmentAlloc any
// SegmentMap lands in is one. The one guess of memcomm-trace report's memory series and of
// memcomm-replay's recorded reserved bytes. Add the segment events in trace order, then ask.
class VirtualReservations {
 public:
  static constexpr size_t kNoIndex = SIZE_MAX;
  // A SegmentAlloc or SegmentFree (flagged: the producer marks it a virtual range) or a SegmentMap;
  // other kinds are ignored. Returns the SegmentAlloc/SegmentFree's index for is_virtual(), kNoIndex
  // for the others.
  size_t add(EventKind kind, uint64_t addr, uint64_t size, bool flagged);
  // Whether the SegmentAlloc/SegmentFree that add() gave `index` is a virtual reservation or its
  // release; final once every event has been added (a later map can still reveal one).
  bool is_virtual(size_t index) const { return instance_virtual_[instance_of_[index]]; }

 private:
  struct Live {
    uint64_t end;     // one past the segment's last byte
    size_t instance;  // index into instance_virtual_
  };
  std::map<uint64_t, Live> live_;        // segments allocated and not freed, by start
  std::vector<bool> instance_virtual_;   // per segment (each SegmentAlloc, each SegmentFree of one from before the trace)
  std::vector<size_t> instance_of_;      // per SegmentAlloc/SegmentFree added: its segment
};

}  // namespace memcomm::prof
