// MemoryRewind: one device's allocator layout at an earlier point of a snapshot's trace, got by
// starting from the snapshot's end state and undoing the trace's events from the last one back.
// The advisor reads the layout before each OOM; the viewer starts its memory fold from the layout
// before the first event (Note [A trace that starts mid-run], viewer/model ingest_snapshot.cpp).
//
// Note [Rewinding to an OOM]: a snapshot's trace is a ring buffer that usually starts mid-run, so a
// forward fold (prof::AllocatorFold) misses every segment and block made before the trace, which on
// a long run is most of the memory. The end state (the `segments` with their blocks) is complete,
// and the trace always holds the latest events, so walking back from the end is exact for what the
// allocator held at any point the trace covers:
//   - undo alloc: the block at addr becomes free; undo free_completed: it is live again (a pending
//     free is still active, so free_requested changes nothing);
//   - undo segment_alloc / segment_map: the range is no longer backed; undo segment_free /
//     segment_unmap: it is backed again, and free.
// Backed ranges of expandable segments (maps and unmaps) join the ranges they touch; separate
// cudaMalloc segments never join, even when their addresses touch. A block revived from a free
// event spans its requested size rounded up to 512 bytes (PyTorch's rounding; the end state has
// the true sizes): a large block can hold up to 1 MiB more than that (a remainder too small to
// split), so the largest free block can read slightly high. An undo the state contradicts (a block
// freed that is not there) is counted, not fatal.
#pragma once

#include <cstdint>
#include <map>

#include "memcomm/snapshot/snapshot.hpp"

namespace memcomm::snapshot {

struct MemoryLevels {
  std::uint64_t live = 0;          // bytes of active blocks (allocated or pending free), as the allocator
                                   // holds them: block sizes, not the requested bytes that "live" means
                                   // elsewhere (advise says "in blocks")
  std::uint64_t reserved = 0;      // backed segment bytes
  std::uint64_t largest_free = 0;  // the largest backed range no active block touches
};

class MemoryRewind {
 public:
  struct Range {
    std::uint64_t end;
    bool joins;  // an expandable segment's range: joins the backed ranges it touches
  };
  struct ActiveBlock {
    std::uint64_t bytes;      // the block's extent (a revived block's: its request rounded up to 512 B)
    std::uint64_t requested;  // what the user asked for (Note [Live means allocated] in allocations.hpp)
    std::int64_t stream;      // the cudaStream_t value, as PyTorch printed it
    bool pending = false;     // freed by the user, held for a stream (active_pending_free)
  };

  // The end state of `device` (its segments and their active blocks).
  MemoryRewind(const Snapshot& snap, int device);
  // Undoes one event (Note [Rewinding to an OOM]); call from the last event back.
  void undo(const Event& e);
  MemoryLevels levels() const;
  std::uint64_t contradictions() const { return contradictions_; }
  // The layout now: backed ranges by start address, active blocks by address.
  const std::map<std::uint64_t, Range>& backed() const { return backed_; }
  const std::map<std::uint64_t, ActiveBlock>& blocks() const { return blocks_; }

 private:
  void back(std::uint64_t addr, std::uint64_t size, bool joins);
  void unback(std::uint64_t addr, std::uint64_t size);
  std::uint64_t largest_gap(std::uint64_t begin, std::uint64_t end) const;

  std::map<std::uint64_t, Range> backed_;          // by start address
  std::map<std::uint64_t, ActiveBlock> blocks_;    // active blocks by address
  std::uint64_t contradictions_ = 0;
  bool requests_recorded_ = true;  // Note [A history without free requests]
};

}  // namespace memcomm::snapshot
