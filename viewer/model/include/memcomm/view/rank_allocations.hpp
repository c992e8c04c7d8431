// A rank's allocations for the allocation timeline and "who holds memory" (issue 18): the
// lifetimes (prof::Allocations, the trace layer's one model of them), and for a PyTorch snapshot
// the stacks behind them, interned once per file and shared by the file's ranks.
//
// Algorithm: a snapshot's lifetimes come from snapshot::snapshot_allocations (the same function
// `memcomm-trace memory` uses) split by device into ranks; other sources (.mct, torch.profiler)
// run their AllocEvents through the same prof::AllocationBuilder, with no stacks. The stacks are
// the snapshot's own interned frames (Note [Interned frames] in memcomm/snapshot/snapshot.hpp):
// each distinct frame and stack once, an Allocation carries a 32-bit stack id. The snapshot's
// per-event arrays are dropped after ingest: only the interning tables stay.
#pragma once

#include <memcomm/snapshot/frames.hpp>
#include <memcomm/snapshot/snapshot.hpp>
#include <memcomm/trace/allocations.hpp>
#include <memcomm/view/allocator_state.hpp>

#include <cstdint>
#include <vector>

namespace memcomm::view {

// The stacks of one snapshot file. StackText points into `snap`: held by shared_ptr, never moved.
struct SnapshotStacks {
  explicit SnapshotStacks(snapshot::Snapshot&& s, std::vector<std::int64_t> stream_values);
  SnapshotStacks(const SnapshotStacks&) = delete;
  SnapshotStacks& operator=(const SnapshotStacks&) = delete;
  snapshot::Snapshot snap;             // interning tables only (device traces and segments dropped)
  snapshot::StackText text;            // memory_viz's lines and sites (Note [Sites])
  std::vector<std::int64_t> streams;   // Allocation::stream -> cudaStream_t value
  std::size_t memory_bytes() const { return snap.interned_bytes() + text.memory_bytes() + streams.capacity() * 8; }
};

// The lifetimes of a rank's block events (Alloc / FreeRequested / FreeCompleted), for sources
// without stacks: stack kNoStackId, category from AllocEvent::category, stream as recorded.
prof::Allocations allocations_from_events(const AllocEvents& events);


}  // namespace memcomm::view
