#include "ingest_trace.hpp"

#include <memcomm/profiler/event.hpp>

#include <fmt/format.h>

#include <map>
#include <unordered_map>

namespace memcomm::view {

namespace {
AllocOp alloc_op(prof::EventKind k) {
  switch (k) {
    case prof::EventKind::Alloc: return AllocOp::Alloc;
    case prof::EventKind::FreeRequested: return AllocOp::FreeRequested;
    case prof::EventKind::FreeCompleted: return AllocOp::FreeCompleted;
    case prof::EventKind::SegmentAlloc:
    case prof::EventKind::SegmentMap: return AllocOp::SegmentAlloc;
    default: return AllocOp::SegmentFree;
  }
}
}  // namespace

void ingest_rank_trace(const prof::RankTrace& rt, TimelineBuilder& b, std::atomic<double>* progress) {
  using prof::EventKind;
  const std::uint32_t rank = rt.rank == prof::kUnknownRank ? 0 : rt.rank;
  if (!rt.host.empty()) b.host(rank, rt.host);
  if (rt.drops) b.dropped(rank, rt.drops);
  // Trace string ids -> builder ids, resolved once per id.
  std::vector<std::uint32_t> ids(rt.strings.size(), UINT32_MAX);
  auto name = [&](prof::StringId id) {
    if (id >= ids.size()) return b.intern("");
    if (ids[id] == UINT32_MAX) ids[id] = b.intern(rt.strings[id]);
    return ids[id];
  };
  std::uint32_t phase_ids[static_cast<int>(prof::Phase::Count)];
  for (int p = 0; p < static_cast<int>(prof::Phase::Count); ++p) phase_ids[p] = b.intern(prof::phase_name(prof::Phase(p)));
  std::map<std::uint16_t, std::vector<prof::RangeEvent>> open;  // per thread, LIFO
  struct Pending {
    prof::CollectiveEvent start;
    bool started = false;
  };
  std::unordered_map<std::uint64_t, Pending> colls;  // (comm, seq) -> start
  std::map<std::uint8_t, std::uint16_t> comm_size;
  const std::size_t n = rt.events.size();
  for (std::size_t i = 0; i < n; ++i) {
    const prof::Event& e = rt.events[i];
    if (progress && (i & 0xFFFFF) == 0) *progress = static_cast<double>(i) / static_cast<double>(n);
    switch (e.kind) {
      case EventKind::Kernel:
      case EventKind::Memcpy:
      case EventKind::Memset: {
        const auto c = e.as<prof::ComputeEvent>();
        const LaneKind lk = e.kind == EventKind::Kernel ? LaneKind::Kernel
                            : e.kind == EventKind::Memcpy ? LaneKind::Memcpy : LaneKind::Memset;
        std::uint32_t nm;
        if (e.kind == EventKind::Kernel) nm = name(c.arg);
        else if (e.kind == EventKind::Memcpy)
          nm = b.intern(fmt::format("memcpy {} {} B", prof::copy_kind_name(prof::CopyKind(c.sub)), prof::decode_bytes32(c.arg)));
        else nm = b.intern(fmt::format("memset {} B", prof::decode_bytes32(c.arg)));
        b.span(rank, lk, c.stream, nm, c.ts, c.end());
        break;
      }
      case EventKind::RangeBegin: {
        const auto r = e.as<prof::RangeEvent>();
        open[r.thread].push_back(r);
        break;
      }
      case EventKind::RangeEnd: {
        const auto r = e.as<prof::RangeEvent>();
        auto& st = open[r.thread];
        if (st.empty()) break;  // an end whose begin was before the trace started
        const prof::RangeEvent begin = st.back();
        st.pop_back();
        if (begin.phase == prof::Phase::Custom)
          b.span(rank, LaneKind::Nvtx, 0, begin.name ? name(begin.name) : phase_ids[0], begin.ts, r.ts);
        else
          b.span(rank, LaneKind::Phase, 0, phase_ids[static_cast<int>(begin.phase)], begin.ts, r.ts,
                 static_cast<std::uint32_t>(begin.id));
        break;
      }
      case EventKind::CollEnqueue:
      case EventKind::CollStart:
      case EventKind::CollEnd: {
        const auto c = e.as<prof::CollectiveEvent>();
        const std::uint64_t key = (static_cast<std::uint64_t>(c.comm) << 32) | c.seq;
        if (e.kind != EventKind::CollEnd) {
          auto& p = colls[key];
          if (!p.started || e.kind == EventKind::CollStart) p.start = c;  // start beats enqueue
          p.started = true;
          break;
        }
        auto it = colls.find(key);
        const auto start = it != colls.end() ? it->second.start.ts : c.ts;
        if (it != colls.end()) colls.erase(it);
        auto cs = comm_size.find(c.comm);
        b.collective(rank, prof::coll_op_name(c.op), c.bytes(), c.comm, c.seq, start, c.ts,
                     cs != comm_size.end() ? cs->second : 0);
        break;
      }
      case EventKind::Alloc:
      case EventKind::FreeRequested:
      case EventKind::FreeCompleted:
      case EventKind::SegmentAlloc:
      case EventKind::SegmentFree:
      case EventKind::SegmentMap:
      case EventKind::SegmentUnmap: {
        const auto m = e.as<prof::MemBlockEvent>();
        b.alloc_event(rank, {m.ts, m.addr(), m.size(), m.stream, alloc_op(e.kind)});
        break;
      }
      case EventKind::Oom: {
        const auto o = e.as<prof::OomEvent>();
        b.alloc_event(rank, {o.ts, 0, o.requested, o.stream, AllocOp::Oom});
        break;
      }
      case EventKind::MemSample: {
        const auto m = e.as<prof::MemSampleEvent>();
        const bool ppm = m.metric == prof::MemMetric::Fragmentation;
        b.counter(rank, prof::mem_metric_name(m.metric), m.ts, ppm ? m.value * 1e-6 : static_cast<double>(m.value),
                  ppm ? "" : "B");
        break;
      }
      case EventKind::Counter: {
        const auto c = e.as<prof::CounterEvent>();
        b.counter(rank, rt.name(c.name), c.ts, c.value);
        break;
      }
      case EventKind::CommInfo: {
        const auto c = e.as<prof::CommInfoEvent>();
        comm_size[c.comm] = c.size;
        break;
      }
      default:
        break;  // launches, syncs, metadata: not drawn yet
    }
  }
}

bool ingest_trace(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress) {
  try {
    prof::TraceSet set = prof::TraceSet::load({path});
    TimelineBuilder b;
    for (const auto& rt : set.ranks) ingest_rank_trace(rt, b, progress);
    out = b.finish(path);
    for (const auto& f : set.files)
      if (f.recovery.truncated) out.sources.back() += " (truncated: " + f.recovery.detail + ")";
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

}  // namespace memcomm::view
