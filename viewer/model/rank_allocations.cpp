// Building a rank's allocation lifetimes (rank_allocations.hpp): one pass over its events through
// prof::AllocationBuilder, or a filter of a snapshot's lifetimes by device.
#include <memcomm/view/rank_allocations.hpp>

#include <algorithm>
#include <utility>

namespace memcomm::view {

SnapshotStacks::SnapshotStacks(snapshot::Snapshot&& s, std::vector<std::int64_t> stream_values)
    : snap(std::move(s)), text(snap), streams(std::move(stream_values)) {
  // The events and the end state are in the Timeline and the Allocations already; only the
  // interning tables back the stacks (Note [Viewer memory budget] in timeline.hpp).
  snap.device_traces = {};
  snap.segments = {};
  snap.release_interning();
}

prof::Allocations allocations_from_events(const AllocEvents& events) {
  prof::AllocationBuilder b;
  for (const AllocEvent& e : events) {
    const prof::BlockInfo info{e.device, e.addr, e.size, static_cast<std::uint16_t>(std::min<std::uint32_t>(e.stream, 0xffff)),
                               prof::kNoStackId, e.category};
    if (e.op == prof::EventKind::Alloc) b.alloc(e.t, info);
    else if (e.op == prof::EventKind::FreeRequested) b.free_requested(e.t, info);
    else if (e.op == prof::EventKind::FreeCompleted) b.free_completed(e.t, info);
  }
  const std::int64_t begin = events.size() ? events[0].t : 0;
  const std::int64_t end = events.size() ? events[events.size() - 1].t : 0;
  prof::Allocations a = b.finish(begin, end);
  a.list.shrink_to_fit();
  return a;
}

}  // namespace memcomm::view
