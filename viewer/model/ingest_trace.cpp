#include "ingest_trace.hpp"

#include <memcomm/profiler/trace_reader.hpp>

#include <fmt/format.h>

#include <tuple>

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

void TraceIngest::add_one(const prof::Event& e, RankState& rs, std::uint32_t rank,
                          std::string_view (*resolve)(const void*, prof::StringId), const void* ctx) {
  using prof::EventKind;
  if (!phases_interned_) {
    for (int p = 0; p < static_cast<int>(prof::Phase::Count); ++p) phase_ids_[p] = b_.intern(prof::phase_name(prof::Phase(p)));
    phases_interned_ = true;
  }
  auto name = [&](prof::StringId id) {
    auto it = rs.ids.find(id);
    if (it != rs.ids.end()) return it->second;
    const std::uint32_t v = b_.intern(resolve(ctx, id));
    rs.ids.emplace(id, v);
    return v;
  };
  const std::int64_t off = rs.offset;
  switch (e.kind) {
    case EventKind::Kernel:
    case EventKind::Memcpy:
    case EventKind::Memset: {
      const auto c = e.as<prof::ComputeEvent>();
      LaneKind lk = LaneKind::Kernel;
      std::uint32_t nm;
      if (e.kind == EventKind::Kernel) {
        nm = name(c.arg);
      } else if (e.kind == EventKind::Memcpy) {
        lk = LaneKind::Memcpy;
        nm = b_.intern(fmt::format("memcpy {} {} B", prof::copy_kind_name(prof::CopyKind(c.sub)), prof::decode_bytes32(c.arg)));
      } else {
        lk = LaneKind::Memset;
        nm = b_.intern(fmt::format("memset {} B", prof::decode_bytes32(c.arg)));
      }
      b_.span(rank, lk, c.stream, nm, c.ts + off, c.end() + off);
      return;
    }
    case EventKind::RangeBegin: {
      const auto r = e.as<prof::RangeEvent>();
      const std::uint32_t nm = r.name ? name(r.name) : phase_ids_[static_cast<int>(r.phase) % static_cast<int>(prof::Phase::Count)];
      rs.open[r.thread].push_back({r.ts + off, r.phase, nm, r.id});
      return;
    }
    case EventKind::RangeEnd: {
      const auto r = e.as<prof::RangeEvent>();
      auto& st = rs.open[r.thread];
      if (st.empty()) return;  // its begin was before the trace started
      const RangeOpen begin = st.back();
      st.pop_back();
      if (begin.phase == prof::Phase::Custom || static_cast<int>(begin.phase) >= static_cast<int>(prof::Phase::Count))
        b_.span(rank, LaneKind::Nvtx, 0, begin.name, begin.ts, r.ts + off);
      else  // phases are named by their kind, so the views can colour and the step table find them
        b_.span(rank, LaneKind::Phase, 0, phase_ids_[static_cast<int>(begin.phase)], begin.ts, r.ts + off,
                static_cast<std::uint32_t>(begin.id));
      return;
    }
    case EventKind::CollEnqueue:
    case EventKind::CollStart:
    case EventKind::CollEnd: {
      const auto c = e.as<prof::CollectiveEvent>();
      const std::uint64_t key = (static_cast<std::uint64_t>(c.comm) << 32) | c.seq;
      if (e.kind != EventKind::CollEnd) {
        auto [it, fresh] = rs.colls.emplace(key, c);
        if (!fresh && e.kind == EventKind::CollStart) it->second = c;  // start beats enqueue
        return;
      }
      auto it = rs.colls.find(key);
      const std::int64_t start = it != rs.colls.end() ? it->second.ts : c.ts;
      if (it != rs.colls.end()) rs.colls.erase(it);
      auto cs = rs.comm_size.find(c.comm);
      b_.collective(rank, prof::coll_op_name(c.op), c.bytes(), c.comm, c.seq, start + off, c.ts + off,
                    cs != rs.comm_size.end() ? cs->second : 0);
      return;
    }
    case EventKind::Alloc:
    case EventKind::FreeRequested:
    case EventKind::FreeCompleted:
    case EventKind::SegmentAlloc:
    case EventKind::SegmentFree:
    case EventKind::SegmentMap:
    case EventKind::SegmentUnmap: {
      const auto m = e.as<prof::MemBlockEvent>();
      b_.alloc_event(rank, {m.ts + off, m.addr(), m.size(), m.stream, alloc_op(e.kind), m.category});
      return;
    }
    case EventKind::Oom: {
      const auto o = e.as<prof::OomEvent>();
      b_.alloc_event(rank, {o.ts + off, 0, o.requested, o.stream, AllocOp::Oom});
      return;
    }
    case EventKind::MemSample: {
      const auto m = e.as<prof::MemSampleEvent>();
      const bool ppm = m.metric == prof::MemMetric::Fragmentation;
      b_.counter(rank, prof::mem_metric_name(m.metric), m.ts + off, ppm ? static_cast<double>(m.value) * 1e-6 : static_cast<double>(m.value),
                 ppm ? "" : "B");
      return;
    }
    case EventKind::Counter: {
      const auto c = e.as<prof::CounterEvent>();
      b_.counter(rank, resolve(ctx, c.name), c.ts + off, c.value);
      return;
    }
    case EventKind::CommInfo: {
      const auto c = e.as<prof::CommInfoEvent>();
      rs.comm_size[c.comm] = c.size;
      return;
    }
    case EventKind::Drops:
      b_.dropped(rank, e.as<prof::DropEvent>().count);
      return;
    case EventKind::Meta: {
      const auto m = e.as<prof::MetaEvent>();
      if (m.key == prof::MetaKey::Host) b_.host(rank, resolve(ctx, m.str));
      return;
    }
    default:
      return;  // launches and syncs are not drawn yet
  }
}

bool ingest_trace(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress) {
  try {
    TimelineBuilder b;
    {
      // Counting pass (decompression is cheap next to reallocating 10 M-event vectors).
      prof::TraceReader counter(path);
      std::map<std::tuple<std::uint32_t, std::uint8_t, std::uint32_t>, std::size_t> spans;
      std::map<std::uint32_t, std::size_t> allocs;
      const std::uint32_t file_rank = counter.header().rank;
      prof::ChunkView c;
      while (counter.next(c)) {
        std::uint32_t rank = c.rank != prof::kUnknownRank ? c.rank : file_rank;
        if (rank == prof::kUnknownRank) rank = 0;
        std::size_t kernels[256] = {}, copies[256] = {}, sets[256] = {}, mem = 0, ranges = 0;
        for (const prof::Event& e : c) {
          const auto k = e.kind;
          if (k == prof::EventKind::Kernel) ++kernels[e.as<prof::ComputeEvent>().stream];
          else if (k == prof::EventKind::Memcpy) ++copies[e.as<prof::ComputeEvent>().stream];
          else if (k == prof::EventKind::Memset) ++sets[e.as<prof::ComputeEvent>().stream];
          else if (prof::family_of(k) == prof::EventFamily::Memory && k != prof::EventKind::MemSample) ++mem;
          else if (k == prof::EventKind::RangeEnd) ++ranges;
        }
        for (std::uint32_t s = 0; s < 256; ++s) {
          if (kernels[s]) spans[{rank, static_cast<std::uint8_t>(LaneKind::Kernel), s}] += kernels[s];
          if (copies[s]) spans[{rank, static_cast<std::uint8_t>(LaneKind::Memcpy), s}] += copies[s];
          if (sets[s]) spans[{rank, static_cast<std::uint8_t>(LaneKind::Memset), s}] += sets[s];
        }
        spans[{rank, static_cast<std::uint8_t>(LaneKind::Phase), 0}] += ranges;
        allocs[rank] += mem;
      }
      for (const auto& [key, n] : spans) b.reserve(std::get<0>(key), static_cast<LaneKind>(std::get<1>(key)), std::get<2>(key), n);
      for (const auto& [rank, n] : allocs) b.reserve_alloc(rank, n);
    }
    prof::TraceReader reader(path);
    TraceIngest ingest(b);
    const bool merged = reader.merged();
    const std::uint32_t file_rank = reader.header().rank;
    const auto strings = [&reader](prof::StringId id) { return reader.string(id); };
    prof::ChunkView c;
    while (reader.next(c)) {
      std::uint32_t rank = c.rank != prof::kUnknownRank ? c.rank : file_rank;
      if (rank == prof::kUnknownRank) rank = 0;
      ingest.add(c.events, c.count, rank, strings, !merged);
      if (progress && reader.recovery().file_bytes)
        *progress = 0.8 * static_cast<double>(reader.recovery().bytes_used) / static_cast<double>(reader.recovery().file_bytes);
    }
    out = b.finish(path);
    if (reader.recovery().truncated) out.sources.back() += " (truncated: " + reader.recovery().detail + ")";
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

}  // namespace memcomm::view
