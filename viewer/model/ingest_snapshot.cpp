#include "ingest_snapshot.hpp"

#include <memcomm/snapshot/memory.hpp>
#include <memcomm/snapshot/snapshot.hpp>
#include <memcomm/view/builder.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <utility>

namespace memcomm::view {
namespace {
// Each rank (a device) gets the lifetimes of its device, all with the file's stacks: the
// lifetimes and clock of `memcomm-trace memory` (snapshot_allocations), so both give one answer.
void attach_allocations(snapshot::Snapshot&& snap, Timeline& tl) {
  snapshot::SnapshotAllocations all = snapshot::snapshot_allocations(snap);
  auto stacks = std::make_shared<const SnapshotStacks>(std::move(snap), std::move(all.streams));
  for (RankData& rd : tl.ranks) {
    const auto device = static_cast<std::uint8_t>(rd.rank);
    rd.allocations = tl.ranks.size() == 1 ? std::move(all.allocations) : prof::allocations_of_device(all.allocations, device);
    rd.alloc_index = AllocationIndex(rd.allocations);
    rd.stacks = stacks;
  }
}
}  // namespace

// Each device of the snapshot becomes one lane group (shown as a rank). Event times are
// snapshot::EventClock's (Note [Event order within a microsecond] in memcomm/snapshot/memory.hpp),
// bounded (Note [Bounded timestamps] in timeline.hpp): the times `memcomm-trace memory` uses.
bool ingest_snapshot(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress) {
  try {
    snapshot::ParseOptions opts;
    opts.keep_frames = true;  // interned once per file: the stacks of the allocation timeline
    opts.progress_user = progress;
    opts.progress = [](std::uint64_t done, std::uint64_t total, void* user) {
      if (user && total) *static_cast<std::atomic<double>*>(user) = 0.9 * static_cast<double>(done) / static_cast<double>(total);
    };
    snapshot::Snapshot snap = snapshot::load_snapshot(path, opts);
    TimelineBuilder b;
    b.allocations_from_producer();
    std::map<std::int64_t, std::uint32_t> streams;  // cudaStream_t value -> small index
    auto stream_index = [&](std::int64_t s) {
      return streams.emplace(s, static_cast<std::uint32_t>(streams.size())).first->second;
    };
    for (std::size_t dev = 0; dev < snap.device_traces.size(); ++dev) {
      const auto& trace = snap.device_traces[dev];
      snapshot::EventClock clock;
      for (const auto& e : trace) {
        const TimeNs t = bounded_time(clock.next(e));
        // Markers and actions this reader does not know (kind Invalid) are not allocator events.
        // Maps and unmaps back parts of a reservation (Note [Virtual reservations] in trace/ virtual_reservations.hpp).
        if (e.kind == prof::EventKind::Invalid) continue;
        b.alloc_event(static_cast<std::uint32_t>(dev), {t, e.addr, e.size, stream_index(e.stream), e.kind});
      }
    }
    // A snapshot whose traces are empty (history not recorded) still shows its end state as one
    // "allocation" per block at t = 0.
    if (b.event_count() == 0) {
      for (const auto& seg : snap.segments) {
        const auto dev = static_cast<std::uint32_t>(seg.device);
        b.alloc_event(dev, {0, seg.address, seg.total_size, stream_index(seg.stream), prof::EventKind::SegmentAlloc});
        for (const auto& blk : seg.blocks)
          if (blk.is_active())
            b.alloc_event(dev, {1, blk.address, blk.size, stream_index(seg.stream), prof::EventKind::Alloc});
      }
    }
    out = b.finish(path);
    attach_allocations(std::move(snap), out);
    if (progress) *progress = 1.0;
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

}  // namespace memcomm::view
