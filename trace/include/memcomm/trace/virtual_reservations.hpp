// VirtualReservations: which SegmentAlloc/SegmentFree events of a trace are virtual reservations,
// found from the producer's flag or, failing that, from the maps that land in them; the one guess of
// memcomm-trace report, memcomm-replay and the AllocatorFold they feed (allocator_fold.hpp).
//
// Note [Virtual reservations]: an expandable segment is a SegmentAlloc of its whole virtual range
// (e.g. 128 GiB) followed by SegmentMap/SegmentUnmap of the parts backed by memory. Reserved bytes
// are the backed ones, so a virtual reservation counts for nothing (its maps count), while a plain
// segment counts whole. memcomm's allocator flags its reservations (MemBlockEvent::virtual_range());
// for traces without the flag, a SegmentAlloc that any map lands in is taken for one, and so is the
// SegmentFree that releases it. The guess misses a reservation that is never mapped, which the flag
// gets right; a SegmentFree of a segment allocated before the trace has only its own flag. The guess
// needs the whole trace (a map can come long after its SegmentAlloc), so it is a pass before the fold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "memcomm/trace/event.hpp"

namespace memcomm::prof {

// Which SegmentAlloc/SegmentFree events are virtual reservations or their releases (Note [Virtual
// reservations] above): the producer's flag, else the guess that a SegmentAlloc any
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
