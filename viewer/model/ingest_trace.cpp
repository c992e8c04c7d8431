#include "ingest_trace.hpp"

#include <memcomm/trace/kineto.hpp>
#include <memcomm/trace/range_pairing.hpp>
#include <memcomm/trace/trace_reader.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace memcomm::view {

namespace {
using prof::EventKind;

// The memory block kinds, Alloc (1) to SegmentUnmap (7): what AllocEvent::op holds besides Oom.
bool is_block_kind(std::uint8_t k) { return k >= std::uint8_t(EventKind::Alloc) && k <= std::uint8_t(EventKind::SegmentUnmap); }

// A trace time on the model's timeline: shifted by the rank's clock offset and bounded (Note
// [Bounded timestamps] in timeline.hpp; both operands are bounded first, so the sum cannot overflow).
TimeNs shift(std::int64_t ts, std::int64_t offset) { return bounded_time(bounded_time(ts) + bounded_time(offset)); }

// A reservation the producer flags is known to be virtual at once, without waiting for a map to
// land in it (Note [Virtual reservations] in trace/ virtual_reservations.hpp); its category byte holds the flag.
AllocEvent to_alloc_event(const prof::MemBlockEvent& m, std::int64_t offset) {
  if (m.virtual_range()) return {shift(m.ts, offset), m.addr(), m.size(), m.stream, m.kind, 0, prof::kSegmentVirtualRange, m.device};
  return {shift(m.ts, offset), m.addr(), m.size(), m.stream, m.kind, m.category, 0, m.device};
}

// Kinds whose state spans chunks: scanned even in chunks outside a time range (memory samples:
// the first one names the device the curves follow, in range or not).
bool pairs_or_meta(prof::EventKind k) {
  return k == EventKind::RangeBegin || k == EventKind::RangeEnd || k == EventKind::CollEnqueue ||
         k == EventKind::CollStart || k == EventKind::CollEnd || k == EventKind::Meta || k == EventKind::CommInfo ||
         k == EventKind::Drops || k == EventKind::MemSample;
}
}  // namespace

TraceIngest::TraceIngest(TimelineBuilder& b) : b_(b) {
  for (int p = 0; p < static_cast<int>(prof::Phase::Count); ++p) phase_ids_[p] = b_.intern(prof::phase_name(prof::Phase(p)));
  std::fill(std::begin(coll_ops_), std::end(coll_ops_), kNoId);
}

std::uint32_t TraceIngest::coll_op(prof::CollOp op) {
  std::uint32_t& id = coll_ops_[static_cast<std::uint8_t>(op)];
  if (id == kNoId) id = b_.intern(prof::coll_op_name(op));
  return id;
}

std::vector<TraceIngest::RangeOpen>& TraceIngest::open_stack(RankState& rs, std::uint16_t thread) {
  if (rs.open_last == nullptr || rs.open_thread != thread) {  // map nodes stay put: the pointer stays valid
    rs.open_last = &rs.open[thread];
    rs.open_thread = thread;
  }
  return *rs.open_last;
}

TraceIngest::RankState& TraceIngest::state(std::uint32_t rank) {
  auto it = ranks_.find(rank);
  if (it != ranks_.end()) return it->second;
  RankState& rs = ranks_[rank];
  rs.phases = &b_.lane_spans(rank, LaneKind::Phase, 0);
  rs.alloc = &b_.alloc_events(rank);
  return rs;
}

std::uint32_t TraceIngest::name(RankState& rs, prof::StringId id, Resolve resolve, const void* ctx) {
  if (id < rs.ids.size() && rs.ids[id] != kNoId) return rs.ids[id];
  const std::uint32_t v = b_.intern(resolve(ctx, id));
  if (id < (1u << 24)) {  // a flat table for the dense ids writers hand out; sparse ones are rare
    if (rs.ids.size() <= id) rs.ids.resize(std::max<std::size_t>(id + 1, rs.ids.size() * 2), kNoId);
    rs.ids[id] = v;
  }
  return v;
}

std::uint32_t TraceIngest::sized_name(prof::EventKind kind, std::uint8_t sub, std::uint32_t arg) {
  const std::uint64_t key = (static_cast<std::uint64_t>(kind) << 40) | (static_cast<std::uint64_t>(sub) << 32) | arg;
  if (key == sized_last_key_) return sized_last_;
  auto it = sized_names_.find(key);
  if (it != sized_names_.end()) {
    sized_last_key_ = key;
    return sized_last_ = it->second;
  }
  const std::uint32_t v =
      kind == prof::EventKind::Memcpy
          ? b_.intern(fmt::format("memcpy {} {} B", prof::copy_kind_name(prof::CopyKind(sub)), prof::decode_bytes32(arg)))
          : b_.intern(fmt::format("memset {} B", prof::decode_bytes32(arg)));
  sized_names_.emplace(key, v);
  return v;
}

void TraceIngest::add_batch(const prof::Event* ev, std::size_t n, std::uint32_t rank, Resolve resolve, const void* ctx,
                            bool apply_offsets) {
  RankState& rs = state(rank);
  if (!apply_offsets) rs.offset = 0;
  if (n > 0) {
    rs.first = std::min(rs.first, shift(ev[0].ts, rs.offset));
    rs.last = std::max(rs.last, shift(ev[n - 1].ts, rs.offset));
  }
  bool skip = false;  // the whole batch lies outside the time range (Note [Time range load])
  if (lo_ != INT64_MIN || hi_ != INT64_MAX) {
    std::int64_t mn = INT64_MAX, mx = INT64_MIN;
    for (std::size_t i = 0; i < n; ++i) {
      mn = std::min(mn, ev[i].ts);
      mx = std::max(mx, prof::event_end(ev[i]));  // a span that starts before lo_ may end inside
    }
    skip = n > 0 && (shift(mx, rs.offset) < lo_ || shift(mn, rs.offset) > hi_);
  }
  const bool whole = lo_ == INT64_MIN && hi_ == INT64_MAX;  // no time range: every event is kept
  std::uint64_t added = 0;  // counted once per batch
  for (std::size_t i = 0; i < n; ++i) {
    const prof::Event& e = ev[i];
    if (whole) {
      // Kernels and allocator events are most of a trace: pushed here, with no call and no
      // switch, once the lane and the name are cached (the general path below caches them).
      if (e.kind == prof::EventKind::Kernel) {
        const auto c = e.as<prof::ComputeEvent>();
        SpanRow* lane = rs.lanes[0][c.stream];
        if (lane != nullptr && c.arg < rs.ids.size() && rs.ids[c.arg] != kNoId) {
          const std::int64_t start = shift(c.ts, rs.offset);
          lane->push_back({start, start + c.duration(), rs.ids[c.arg], c.sub == 1 ? kCommKernel : 0});
          ++added;
          continue;
        }
      } else if (is_block_kind(static_cast<std::uint8_t>(e.kind))) {
        rs.alloc->push_back(to_alloc_event(e.as<prof::MemBlockEvent>(), rs.offset));
        ++added;
        continue;
      }
    }
    if (skip && !pairs_or_meta(e.kind)) {
      if (is_block_kind(static_cast<std::uint8_t>(e.kind)) && shift(e.ts, rs.offset) < lo_) b_.blocks_cut(rank);  // as in add_one()
      continue;
    }
    if (apply_offsets && e.kind == prof::EventKind::Meta) {
      const auto m = e.as<prof::MetaEvent>();
      if (m.key == prof::MetaKey::ClockOffset) {
        if (rs.offset_records_to_skip > 0) --rs.offset_records_to_skip;
        else rs.offset = bounded_time(m.value);
      }
    }
    added += add_one(e, rs, rank, resolve, ctx);
  }
  b_.add_events(added);
}

std::vector<prof::RunFacts> TraceIngest::run_facts(const std::string& source, std::uint32_t header_world) const {
  std::vector<prof::RunFacts> out;
  for (const auto& [rank, rs] : ranks_) {
    prof::RunFacts f;
    f.rank = rank;
    f.source = source;
    f.world_size = rs.world_size != 0 ? rs.world_size : header_world;
    if (rs.start_time && rs.first <= rs.last) {
      const std::int64_t wall_minus = prof::wall_minus_timeline(rs.start_time->first, rs.start_time->second, rs.kineto);
      f.wall_begin = wall_minus + rs.first;
      f.wall_end = wall_minus + rs.last;
    }
    out.push_back(std::move(f));
  }
  return out;
}

// The per-kind parts of add_one(): each returns the model events it added (0 or 1).

std::uint64_t TraceIngest::add_compute_span(const prof::Event& e, RankState& rs, std::uint32_t rank, Resolve resolve,
                                            const void* ctx) {
  const auto c = e.as<prof::ComputeEvent>();
  const std::int64_t start = shift(c.ts, rs.offset), end = start + c.duration();
  if (!keeps_span(start, end)) return 0;
  const int k = e.kind == EventKind::Kernel ? 0 : e.kind == EventKind::Memcpy ? 1 : 2;
  SpanRow*& lane = rs.lanes[k][c.stream];
  if (lane == nullptr) {
    static constexpr LaneKind kinds[3] = {LaneKind::Kernel, LaneKind::Memcpy, LaneKind::Memset};
    lane = &b_.lane_spans(rank, kinds[k], c.stream);
  }
  const std::uint32_t nm = k == 0 ? name(rs, c.arg, resolve, ctx) : sized_name(e.kind, c.sub, c.arg);
  lane->push_back({start, std::max(start, end), nm, k == 0 && c.sub == 1 ? kCommKernel : 0});
  return 1;
}

SpanRow& TraceIngest::nvtx_lane(RankState& rs, std::uint32_t rank, std::uint16_t thread) {
  if (rs.nvtx_last == nullptr || rs.nvtx_thread != thread) {  // the builder's arrays stay put
    rs.nvtx_last = &b_.lane_spans(rank, LaneKind::Nvtx, thread);
    rs.nvtx_thread = thread;
  }
  return *rs.nvtx_last;
}

// Span::payload of a phase: its step number, or for a comm phase (memcomm's own, unnamed) the thread it blocked.
std::uint32_t TraceIngest::phase_payload(const RangeOpen& begin, std::uint16_t thread) {
  return begin.phase == prof::Phase::Comm ? thread : static_cast<std::uint32_t>(begin.id);
}

std::uint64_t TraceIngest::close_range(const prof::Event& e, RankState& rs, std::uint32_t rank) {
  const auto r = e.as<prof::RangeEvent>();
  auto& st = open_stack(rs, r.thread);
  const auto k = prof::range_closed_by(st, r.phase, [](const RangeOpen& o) { return o.phase; });  // Note [Pairing a range's end]
  if (!k) return 0;  // its begin was before the trace started
  const RangeOpen begin = st[*k];
  st.erase(st.begin() + static_cast<std::ptrdiff_t>(*k));
  const std::int64_t end = std::max(begin.ts, shift(r.ts, rs.offset));
  if (!keeps_span(begin.ts, end)) return 0;
  const bool comm_call = begin.phase == prof::Phase::Comm && begin.named;  // a Gloo or c10d:: operator
  const bool annotation = begin.phase == prof::Phase::Annotation;
  if (comm_call || annotation || begin.phase == prof::Phase::Custom ||
      static_cast<int>(begin.phase) >= static_cast<int>(prof::Phase::Count))
    nvtx_lane(rs, rank, r.thread).push_back({begin.ts, end, begin.name, comm_call ? kCommCall : annotation ? kAnnotation : 0});
  else  // phases are named by their kind, so the views can colour and the step table find them
    rs.phases->push_back({begin.ts, end, phase_ids_[static_cast<int>(begin.phase)], phase_payload(begin, r.thread)});
  if (begin.phase == prof::Phase::Step && !rs.step_ids) {
    rs.step_ids = true;
    b_.step_ids_recorded(rank);
  }
  return 1;
}

// A launch or sync call on a host thread: a span on the thread's lane, inside the ranges it ran in.
std::uint64_t TraceIngest::add_host_span(const prof::Event& e, RankState& rs, std::uint32_t rank, Resolve resolve,
                                         const void* ctx) {
  const auto c = e.as<prof::ComputeEvent>();
  if (!c.on_host(e.kind)) return 0;  // a device-side sync: no lane shows it
  const std::int64_t start = shift(c.ts, rs.offset), end = start + c.duration();
  if (!keeps_span(start, end)) return 0;
  nvtx_lane(rs, rank, c.thread()).push_back({start, end, name(rs, c.arg, resolve, ctx), kHostCall});
  return 1;
}

void TraceIngest::add_meta(const prof::Event& e, RankState& rs, std::uint32_t rank, Resolve resolve, const void* ctx) {
  const auto m = e.as<prof::MetaEvent>();
  switch (m.key) {
    case prof::MetaKey::WorldSize:
      rs.world_size = static_cast<std::uint32_t>(m.value);
      return;
    case prof::MetaKey::StartTime:
      rs.start_time = std::make_pair(shift(e.ts, rs.offset), bounded_time(m.value));
      return;
    case prof::MetaKey::Host:
      return b_.host(rank, resolve(ctx, m.str));
    case prof::MetaKey::Tag:  // a torch.profiler trace began mid-run (Note [Memory curves from block events])
      if (resolve(ctx, m.str) == prof::kKinetoSourceTag) {
        b_.blocks_cut(rank);
        rs.kineto = true;
      }
      return;
    case prof::MetaKey::ThreadName:
      if (m.str != prof::kNoString) b_.lane_name(rank, LaneKind::Nvtx, m.thread, resolve(ctx, m.str));
      return;
    case prof::MetaKey::StreamName:
      if (m.str != prof::kNoString) b_.lane_name(rank, LaneKind::Kernel, m.thread, resolve(ctx, m.str));
      return;
    default:
      return;
  }
}

// Enqueue and start are held by (comm, seq) until the end completes the span.
std::uint64_t TraceIngest::add_collective(const prof::Event& e, RankState& rs, std::uint32_t rank) {
  const auto c = e.as<prof::CollectiveEvent>();
  const std::uint64_t key = (static_cast<std::uint64_t>(c.comm) << 32) | c.seq;
  if (e.kind != EventKind::CollEnd) {
    auto [it, fresh] = rs.colls.emplace(key, c);
    if (!fresh && e.kind == EventKind::CollStart) it->second = c;  // start beats enqueue
    return 0;
  }
  auto it = rs.colls.find(key);
  const std::int64_t start = it != rs.colls.end() ? it->second.ts : c.ts;
  if (it != rs.colls.end()) rs.colls.erase(it);
  if (!keeps_span(shift(start, rs.offset), shift(c.ts, rs.offset))) return 0;
  Collective out;
  out.bytes = c.bytes();
  out.op = coll_op(c.op);
  out.comm = c.comm;
  out.comm_key = rs.comm_known[c.comm] ? rs.comm_hash[c.comm] : c.comm;
  out.seq = c.seq;
  out.start = shift(start, rs.offset);
  out.end = std::max(out.start, shift(c.ts, rs.offset));
  out.group_size = rs.comm_size[c.comm] ? rs.comm_size[c.comm] : (rs.world_size ? rs.world_size : header_world_);
  b_.collectives(rank).push_back(out);
  return 1;
}

std::uint64_t TraceIngest::add_block_event(const prof::Event& e, RankState& rs, std::uint32_t rank) {
  const auto m = e.as<prof::MemBlockEvent>();
  if (!keeps_at(shift(m.ts, rs.offset))) {
    // Note [Memory curves from block events] (allocator_fold.hpp): block events cut before the
    // range leave the fold of the rest incomplete.
    if (shift(m.ts, rs.offset) < lo_) b_.blocks_cut(rank);
    return 0;
  }
  rs.alloc->push_back(to_alloc_event(m, rs.offset));
  return 1;
}

std::uint64_t TraceIngest::add_mem_sample(const prof::Event& e, RankState& rs, std::uint32_t rank) {
  const auto m = e.as<prof::MemSampleEvent>();
  const int metric = static_cast<int>(m.metric);
  // One device's memory per rank (Note [Memory curves from block events], allocator_fold.hpp):
  // a GPU's level samples, else the host's, also when a time range starts after them (as the whole
  // file's curves would); samples of other devices are not mixed into its curves.
  if (prof::is_level_metric(m.metric) && prof::better_curve_device(rs.mem_device, m.device)) {
    rs.mem_device = m.device;
    b_.memory_sample_device(rank, m.device);  // drops the host's samples kept so far, if any
    std::fill(std::begin(rs.metrics), std::end(rs.metrics), nullptr);
  }
  if (!keeps_at(shift(m.ts, rs.offset))) return 0;
  if (rs.mem_device >= 0 && m.device != rs.mem_device) return 0;
  const bool ppm = m.metric == prof::MemMetric::Fragmentation;
  CounterSeries* series = metric < static_cast<int>(prof::MemMetric::Count) ? rs.metrics[metric] : nullptr;
  if (series == nullptr) {
    series = &b_.counter_series(rank, prof::mem_metric_name(m.metric), ppm ? "" : "B");
    if (metric < static_cast<int>(prof::MemMetric::Count)) rs.metrics[metric] = series;
  }
  series->add(shift(m.ts, rs.offset), ppm ? static_cast<double>(m.value) * 1e-6 : static_cast<double>(m.value));
  return 1;
}

std::uint64_t TraceIngest::add_one(const prof::Event& e, RankState& rs, std::uint32_t rank, Resolve resolve, const void* ctx) {
  switch (e.kind) {
    case EventKind::Kernel:
    case EventKind::Memcpy:
    case EventKind::Memset:
      return add_compute_span(e, rs, rank, resolve, ctx);
    case EventKind::RangeBegin: {
      const auto r = e.as<prof::RangeEvent>();
      const std::uint32_t nm = r.name ? name(rs, r.name, resolve, ctx)
                                      : phase_ids_[static_cast<int>(r.phase) % static_cast<int>(prof::Phase::Count)];
      open_stack(rs, r.thread).push_back({shift(r.ts, rs.offset), r.phase, nm, r.id, r.name != 0});
      return 0;
    }
    case EventKind::RangeEnd:
      return close_range(e, rs, rank);
    case EventKind::Launch:
    case EventKind::Sync:
      return add_host_span(e, rs, rank, resolve, ctx);
    case EventKind::CollEnqueue:
    case EventKind::CollStart:
    case EventKind::CollEnd:
      return add_collective(e, rs, rank);
    case EventKind::Alloc:
    case EventKind::FreeRequested:
    case EventKind::FreeCompleted:
    case EventKind::SegmentAlloc:
    case EventKind::SegmentFree:
    case EventKind::SegmentMap:
    case EventKind::SegmentUnmap:
      return add_block_event(e, rs, rank);
    case EventKind::Oom: {
      const auto o = e.as<prof::OomEvent>();
      if (!keeps_at(shift(o.ts, rs.offset))) return 0;
      rs.alloc->push_back({shift(o.ts, rs.offset), 0, o.requested, o.stream, EventKind::Oom});
      return 1;
    }
    case EventKind::MemSample:
      return add_mem_sample(e, rs, rank);
    case EventKind::Counter: {
      const auto c = e.as<prof::CounterEvent>();
      if (!keeps_at(shift(c.ts, rs.offset))) return 0;
      CounterSeries*& series = rs.counters[c.name];
      if (series == nullptr) series = &b_.counter_series(rank, resolve(ctx, c.name));
      series->add(shift(c.ts, rs.offset), c.value);
      return 1;
    }
    case EventKind::CommInfo: {
      const auto c = e.as<prof::CommInfoEvent>();
      rs.comm_size[c.comm] = c.size;
      rs.comm_hash[c.comm] = c.hash;
      rs.comm_known.set(c.comm);
      return 0;
    }
    case EventKind::Drops:
      b_.dropped(rank, e.as<prof::DropEvent>().count);
      return 0;
    case EventKind::Meta:
      add_meta(e, rs, rank, resolve, ctx);
      return 0;
    default:
      return 0;
  }
}

}  // namespace memcomm::view
