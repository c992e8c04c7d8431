#include "ingest_snapshot.hpp"

#include <memcomm/snapshot/memory.hpp>
#include <memcomm/snapshot/memory_rewind.hpp>
#include <memcomm/snapshot/snapshot.hpp>
#include <memcomm/view/builder.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace memcomm::view {
namespace {
// Each rank (a device) gets the lifetimes of its device, all with the file's stacks: the
// lifetimes and clock of `memcomm-trace memory` (snapshot_allocations), so both give one answer.
void attach_allocations(snapshot::Snapshot&& snap, Timeline& tl) {
  snapshot::SnapshotAllocations all = snapshot::snapshot_allocations(snap);
  tl.first_event = all.allocations.begin;  // Note [Times from the first event]
  for (std::string& w : all.warnings()) tl.load_warnings.push_back(std::move(w));  // as memcomm-trace memory says them
  auto stacks = std::make_shared<const SnapshotStacks>(std::move(snap), std::move(all.streams));
  for (RankData& rd : tl.ranks) {
    const auto device = static_cast<std::uint8_t>(rd.rank);
    rd.allocations = tl.ranks.size() == 1 ? std::move(all.allocations) : prof::allocations_of_device(all.allocations, device);
    rd.alloc_index = AllocationIndex(rd.allocations);
    rd.stacks = stacks;
    rd.stand_in_id = true;  // the device's number (Note [Rank ids across files])
    rd.snapshot_device = device;
  }
}
}  // namespace

// Note [A trace that starts mid-run]: PyTorch keeps a snapshot's history in a ring buffer, and
// recording often starts after the model was built, so the trace usually begins with segments and
// blocks already there. Folded from its first event alone, the memory curves missed all of them:
// reserved below allocated on a shared snapshot (283 against 299 MB, where 522 MB were live at the
// peak), and a device whose trace is empty vanished. The end state is complete, though, and undoing
// the trace from its last event back gives the layout before its first (snapshot::MemoryRewind,
// Note [Rewinding to an OOM]). So each device's fold starts from that layout, given just before its
// first event: the backed ranges (a cudaMalloc segment as a SegmentAlloc, an expandable segment's
// mapped pages as SegmentMaps) and the active blocks (as Allocs of their requested bytes, the live
// bytes of Note [Live means allocated]). A snapshot without history is the same case with nothing
// to undo: its end state, at time 0.
namespace {
// The time of a device trace's first event on the ingest's clock (EventClock starts afresh per
// device), else `none`.
TimeNs first_time(const std::vector<snapshot::Event>& trace, TimeNs none) {
  if (trace.empty()) return none;
  snapshot::EventClock clock;
  return bounded_time(clock.next(trace.front()));
}

// Devices with events or end-state segments (a negative device, which only a corrupt file names, is
// no rank).
std::set<int> devices_of(const snapshot::Snapshot& snap) {
  std::set<int> out;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d)
    if (!snap.device_traces[d].empty()) out.insert(static_cast<int>(d));
  for (const auto& seg : snap.segments)
    if (seg.device >= 0) out.insert(seg.device);
  return out;
}

// The stream of the end-state segment of `device` that holds `addr` (0 when none does: a segment
// the trace freed), for the segments the start state gives.
class SegmentStreams {
 public:
  SegmentStreams(const snapshot::Snapshot& snap, int device) {
    for (const auto& seg : snap.segments)
      if (seg.device == device) by_start_[seg.address] = {seg.address + seg.total_size, seg.stream};
  }
  std::int64_t at(std::uint64_t addr) const {
    auto it = by_start_.upper_bound(addr);
    if (it == by_start_.begin()) return 0;
    --it;
    return addr < it->second.first ? it->second.second : 0;
  }

 private:
  std::map<std::uint64_t, std::pair<std::uint64_t, std::int64_t>> by_start_;  // start -> (end, stream)
};

template <class StreamIndex>
void add_start_state(const snapshot::Snapshot& snap, int device, TimeNs at, TimelineBuilder& b, StreamIndex&& stream_index) {
  snapshot::MemoryRewind rewind(snap, device);
  const auto& trace = device < static_cast<int>(snap.device_traces.size()) ? snap.device_traces[std::size_t(device)]
                                                                         : std::vector<snapshot::Event>();
  for (auto e = trace.rbegin(); e != trace.rend(); ++e) rewind.undo(*e);
  const auto dev = static_cast<std::uint32_t>(device);
  const SegmentStreams streams(snap, device);
  for (const auto& [begin, r] : rewind.backed()) {
    const auto kind = r.joins ? prof::EventKind::SegmentMap : prof::EventKind::SegmentAlloc;
    b.alloc_event(dev, {at - 2, begin, r.end - begin, stream_index(streams.at(begin)), kind});
  }
  for (const auto& [addr, blk] : rewind.blocks()) {
    b.alloc_event(dev, {at - 1, addr, blk.requested, stream_index(blk.stream), prof::EventKind::Alloc});
    if (blk.pending)  // freed before the trace, its stream not done: held, no longer the user's
      b.alloc_event(dev, {at - 1, addr, blk.requested, stream_index(blk.stream), prof::EventKind::FreeRequested});
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
    // See Note [A trace that starts mid-run]: a device with no events starts with the others.
    TimeNs earliest = kTimeLimit;
    for (const auto& trace : snap.device_traces) earliest = std::min(earliest, first_time(trace, kTimeLimit));
    if (earliest == kTimeLimit) earliest = 2;  // no history at all: the end state at times 0 and 1
    for (const int device : devices_of(snap)) {
      const auto& traces = snap.device_traces;
      const TimeNs t0 = device < static_cast<int>(traces.size()) ? first_time(traces[std::size_t(device)], earliest) : earliest;
      add_start_state(snap, device, t0, b, stream_index);
    }
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
