// See request_builder.hpp and Note [Rebuilding requests].
#include "request_builder.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "memcomm/trace/virtual_reservations.hpp"

namespace memcomm::replay {

// Note [Reserved bytes of expandable segments]: an expandable segment is a segment_alloc of its whole
// virtual range (memcomm's allocator reserves e.g. 128 GiB of address space) followed by
// segment_map/segment_unmap of the parts backed by memory. Reserved bytes are the backed ones, which
// is the meaning the profiler's analysis gives them (Note [Virtual reservations] in
// trace/ virtual_reservations.hpp, whose prof::VirtualReservations makes the same call here): a
// segment_alloc that any map lands in counts for nothing, and neither does its segment_free, while its
// maps and unmaps count; a plain segment counts whole. memcomm's .mct flags its reservations
// (prof::MemBlockEvent::virtual_range()), which also covers one that is never mapped; the guess from
// landing maps serves traces without the flag.
// Nor is the reservation a source call, as in the allocator's own DeviceStats::source_calls()
// (segment allocations plus maps; reserving address space is neither). PyTorch's snapshots show
// expandable segments through their maps alone, so the rule leaves their recorded figures as they
// were (the shared snapshots' are checked against SOURCES.md in tests/replay).
std::vector<bool> RequestBuilder::virtual_reservations(const std::vector<SegmentStep>& steps) {
  prof::VirtualReservations guess;
  std::vector<std::size_t> index(steps.size(), prof::VirtualReservations::kNoIndex);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const SegmentStep& s = steps[i];
    if (s.addr == kNoAddr) continue;  // no address to match: only its own flag can tell
    const prof::EventKind kind = s.mapped ? (s.grow ? prof::EventKind::SegmentMap : prof::EventKind::SegmentUnmap)
                                          : (s.grow ? prof::EventKind::SegmentAlloc : prof::EventKind::SegmentFree);
    index[i] = guess.add(kind, s.addr, s.bytes, s.flagged_virtual);
  }
  std::vector<bool> is_virtual(steps.size(), false);
  for (std::size_t i = 0; i < steps.size(); ++i)
    is_virtual[i] = index[i] == prof::VirtualReservations::kNoIndex ? steps[i].flagged_virtual : guess.is_virtual(index[i]);
  return is_virtual;
}

RequestBuilder::RequestBuilder(int rank, int device) {
  out_.rank = rank;
  out_.device = device;
}

void RequestBuilder::block_added(std::uint64_t, const prof::FoldBlock& b) {
  if (block_size_.size() <= b.id) block_size_.resize(b.id + 1);
  block_size_[b.id] = b.size;
  traced_.push_back(Request{b.size, stream_, b.id, Request::Op::alloc});
}

void RequestBuilder::block_removed(std::uint64_t, const prof::FoldBlock& b) {
  traced_.push_back(Request{0, stream_, b.id, Request::Op::free});
}

void RequestBuilder::preexisting(std::uint64_t addr, std::uint64_t size, std::int64_t stream) {
  const std::uint32_t id = fold_.take_block_id();
  if (block_size_.size() <= id) block_size_.resize(id + 1);
  block_size_[id] = size;
  pre_.push_back(Preexisting{addr, size, stream, id});
}

void RequestBuilder::alloc(std::uint64_t addr, std::uint64_t size, std::int64_t stream) {
  ++out_.trace_events;
  stream_ = stream;
  // Replaced: the trace lost a free; the fold ended the old block first (its free request).
  if (fold_.apply(prof::EventKind::Alloc, addr, size, false, this) == prof::FoldCheck::Replaced) ++out_.anomalies;
}

void RequestBuilder::free_completed(std::uint64_t addr, std::uint64_t size, std::int64_t stream) {
  ++out_.trace_events;
  stream_ = stream;
  switch (fold_.apply(prof::EventKind::FreeCompleted, addr, size, false, this)) {
    case prof::FoldCheck::Ended:  // freed twice with no alloc between: a damaged trace
      ++out_.anomalies;
      return;
    case prof::FoldCheck::Unknown:  // allocated before the trace started
      preexisting(addr, size, stream);
      traced_.push_back(Request{0, stream, pre_.back().block, Request::Op::free});
      return;
    default:  // the fold's block ended: block_removed() wrote its free
      return;
  }
}

void RequestBuilder::free_requested(std::uint64_t addr) {
  ++out_.trace_events;
  fold_.apply(prof::EventKind::FreeRequested, addr, 0, false, this);  // the request is its completion's
}

// The fold sees the segments too (a block's segment; one freed with live blocks ends them), with the
// trace's own flag; the reserved figures are finish()'s (Note [Reserved bytes of expandable segments]).
void RequestBuilder::fold_segment(prof::EventKind kind, std::uint64_t addr, std::uint64_t bytes, bool virtual_range) {
  stream_ = 0;
  if (addr != kNoAddr) fold_.apply(kind, addr, bytes, virtual_range, this);
}

void RequestBuilder::segment_grow(std::uint64_t addr, std::uint64_t bytes, bool mapped, bool virtual_range) {
  ++out_.trace_events;
  out_.recorded.expandable |= mapped;
  segment_steps_.push_back(SegmentStep{addr, bytes, true, mapped, virtual_range && !mapped});
  fold_segment(mapped ? prof::EventKind::SegmentMap : prof::EventKind::SegmentAlloc, addr, bytes, virtual_range && !mapped);
}

void RequestBuilder::segment_shrink(std::uint64_t addr, std::uint64_t bytes, bool mapped, bool virtual_range) {
  ++out_.trace_events;
  out_.recorded.expandable |= mapped;
  segment_steps_.push_back(SegmentStep{addr, bytes, false, mapped, virtual_range && !mapped});
  fold_segment(mapped ? prof::EventKind::SegmentUnmap : prof::EventKind::SegmentFree, addr, bytes, virtual_range && !mapped);
}

void RequestBuilder::oom() {
  ++out_.trace_events;
  ++out_.trace_ooms;
}

void RequestBuilder::other() { ++out_.trace_events; }

void RequestBuilder::anomaly() {
  ++out_.trace_events;
  ++out_.anomalies;
}

void RequestBuilder::end_block(std::uint64_t addr, std::uint64_t requested, std::int64_t stream) {
  if (const prof::FoldBlock* b = fold_.block(addr)) {  // an alloc or free named it
    // Only its free request is in the trace and it is still held (active_pending_free): allocated
    // before the trace, held to the end, as replay holds a block until its free completes.
    if (b->life == prof::BlockLife::Named) return preexisting(addr, requested, stream);
    if (!b->live()) ++out_.anomalies;  // the trace freed it, yet it is live at the end
    return;
  }
  preexisting(addr, requested, stream);
}

void RequestBuilder::end_reserved(std::uint64_t bytes, bool expandable) {
  has_end_state_ = true;
  end_reserved_ += bytes;
  out_.recorded.expandable |= expandable;
}

std::uint64_t RequestBuilder::untraced_live(std::uint64_t live_before) {
  std::uint64_t freed = 0;  // pre-trace blocks the trace freed
  for (const Preexisting& p : pre_) freed += p.size;
  if (live_before <= freed) return 0;
  preexisting(0, live_before - freed, 0);  // address 0: no event names it; it sorts first
  return live_before - freed;
}

DeviceRequests RequestBuilder::finish() {
  std::sort(pre_.begin(), pre_.end(), [](const Preexisting& a, const Preexisting& b) { return a.addr < b.addr; });
  out_.requests.reserve(pre_.size() + traced_.size());
  for (const auto& p : pre_) {
    out_.requests.push_back(Request{p.size, p.stream, p.block, Request::Op::alloc});
    out_.preexisting_bytes += p.size;
  }
  out_.preexisting_blocks = pre_.size();
  out_.requests.insert(out_.requests.end(), traced_.begin(), traced_.end());
  out_.block_count = static_cast<std::uint32_t>(block_size_.size());

  constexpr std::uint64_t kMostLive = std::uint64_t{1} << 62;  // Note [Live bytes past 4 EiB]
  std::uint64_t cur = 0;
  for (const Request& r : out_.requests) {
    if (r.op == Request::Op::alloc) {
      if (r.size > kMostLive - cur)
        throw LiveBytesTooLarge(fmt::format("device {}: live bytes pass 2^62 (4 EiB) with a block of {} bytes: no "
                                            "allocator holds that much; the sizes are not a real run's", out_.device, r.size));
      cur += r.size;
      out_.peak_live = std::max(out_.peak_live, cur);
    } else if (r.op == Request::Op::free) {
      cur -= block_size_[r.block];
    }
  }

  // What the traced allocator reserved: start = end state minus the trace's net change (0 without an
  // end state, as for our own traces, which start with the process), then replay the segment events.
  RecordedReserved& rec = out_.recorded;
  rec.known = has_end_state_ || !segment_steps_.empty();
  rec.at_end = end_reserved_;
  const std::vector<bool> is_virtual = virtual_reservations(segment_steps_);
  std::vector<std::int64_t> steps;  // signed reserved-byte changes, in trace order
  steps.reserve(segment_steps_.size());
  for (std::size_t i = 0; i < segment_steps_.size(); ++i) {
    const SegmentStep& s = segment_steps_[i];
    // Neither reserved bytes nor a source call (Note [Reserved bytes of expandable segments]).
    if (is_virtual[i]) continue;
    ++(s.grow ? rec.source_allocs : rec.source_frees);
    steps.push_back(s.grow ? static_cast<std::int64_t>(s.bytes) : -static_cast<std::int64_t>(s.bytes));
  }
  std::int64_t net = 0;
  for (std::int64_t d : steps) net += d;
  std::int64_t start = has_end_state_ ? static_cast<std::int64_t>(end_reserved_) - net : 0;
  if (start < 0) {  // segment events that the end state cannot explain
    ++out_.anomalies;
    start = 0;
  }
  rec.at_start = static_cast<std::uint64_t>(start);
  std::int64_t r = start, peak = start;
  for (std::int64_t d : steps) {
    r += d;
    peak = std::max(peak, r);
  }
  rec.peak = static_cast<std::uint64_t>(peak);
  if (!has_end_state_) rec.at_end = static_cast<std::uint64_t>(std::max<std::int64_t>(r, 0));
  return std::move(out_);
}

}  // namespace memcomm::replay
