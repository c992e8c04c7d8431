// The analysis: see Note [Breakdown definitions] and Note [Collective bandwidth] in analysis.hpp.
#include "memcomm/trace/analysis.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace memcomm::prof {

std::vector<RangeSpan> pair_ranges(const RankTrace& r) {
  std::vector<RangeSpan> out;
  std::unordered_map<uint16_t, std::vector<size_t>> open;  // thread -> stack of indices into out
  const int64_t trace_end = r.events.empty() ? 0 : r.events.back().ts;
  for (const Event& e : r.events) {
    if (e.kind == EventKind::RangeBegin) {
      const auto b = e.as<RangeEvent>();
      auto& stack = open[b.thread];
      out.push_back({b.phase, b.name, b.id, b.thread, uint16_t(stack.size()), b.ts, trace_end, false});
      stack.push_back(out.size() - 1);
    } else if (e.kind == EventKind::RangeEnd) {
      const auto en = e.as<RangeEvent>();
      auto& stack = open[en.thread];
      // LIFO; tolerate a lost begin (dropped) by popping only a range of the same phase.
      for (size_t k = stack.size(); k-- > 0;) {
        if (out[stack[k]].phase == en.phase) {
          out[stack[k]].end = en.ts;
          out[stack[k]].closed = true;
          stack.resize(k);
          break;
        }
      }
    }
  }
  return out;
}

std::vector<CollectiveOnRank> collectives_of(const RankTrace& r) {
  std::unordered_map<uint8_t, uint64_t> comm_hash;
  for (const Event& e : r.events)
    if (e.kind == EventKind::CommInfo) comm_hash[e.as<CommInfoEvent>().comm] = e.as<CommInfoEvent>().hash;
  std::vector<CollectiveOnRank> out;
  std::map<std::pair<uint8_t, uint32_t>, size_t> index;
  for (const Event& e : r.events) {
    if (family_of(e.kind) != EventFamily::Communication) continue;
    const auto c = e.as<CollectiveEvent>();
    auto [it, fresh] = index.emplace(std::make_pair(c.comm, c.seq), out.size());
    if (fresh) {
      CollectiveOnRank x;
      auto h = comm_hash.find(c.comm);
      x.comm_key = h != comm_hash.end() ? h->second : c.comm;
      x.comm = c.comm;
      x.seq = c.seq;
      x.op = c.op;
      x.dtype = c.dtype;
      x.bytes = c.bytes();
      x.bucket = c.bucket;
      out.push_back(x);
    }
    CollectiveOnRank& x = out[it->second];
    if (e.kind == EventKind::CollEnqueue) x.enqueue = c.ts;
    if (e.kind == EventKind::CollStart) x.start = c.ts;
    if (e.kind == EventKind::CollEnd) x.end = c.ts;
    if (x.bytes == 0) x.bytes = c.bytes();
  }
  return out;
}

double busbw_factor(CollOp op, int n) {
  if (n <= 0) n = 1;
  switch (op) {
    case CollOp::AllReduce: return 2.0 * (n - 1) / n;
    case CollOp::AllGather:
    case CollOp::ReduceScatter:
    case CollOp::AllToAll: return double(n - 1) / n;
    default: return 1.0;
  }
}

RankSpans spans_of(const RankTrace& r, const std::vector<RangeSpan>& ranges,
                   const std::vector<CollectiveOnRank>& colls) {
  RankSpans s;
  std::vector<Interval> comm_kernels;
  for (const Event& e : r.events) {
    if (e.kind == EventKind::Kernel) {
      s.gpu_mode = true;
      const auto k = e.as<ComputeEvent>();
      (k.sub == 1 ? comm_kernels : s.compute).push_back({k.ts, k.end()});
    } else if (e.kind == EventKind::Memcpy || e.kind == EventKind::Memset) {
      const auto k = e.as<ComputeEvent>();
      s.memcpy.push_back({k.ts, k.end()});
    }
  }
  if (!s.gpu_mode) {
    for (const RangeSpan& rs : ranges)
      if (rs.phase == Phase::Forward || rs.phase == Phase::Backward || rs.phase == Phase::Optimizer ||
          rs.phase == Phase::Eval)
        s.compute.push_back({rs.begin, rs.end});
  }
  if (!comm_kernels.empty()) {
    s.comm = std::move(comm_kernels);
  } else {
    for (const CollectiveOnRank& c : colls) {
      const int64_t b = c.start >= 0 ? c.start : c.enqueue;
      if (b >= 0 && c.end > b) s.comm.push_back({b, c.end});
    }
  }
  merge_intervals(s.compute);
  merge_intervals(s.comm);
  merge_intervals(s.memcpy);
  return s;
}

Breakdown breakdown_over(const RankSpans& s, int64_t lo, int64_t hi) {
  Breakdown b;
  if (hi <= lo) return b;
  b.window_ns = hi - lo;
  const auto compute = clip(s.compute, lo, hi), comm = clip(s.comm, lo, hi), mem = clip(s.memcpy, lo, hi);
  auto len = [](const std::vector<Interval>& v) {
    int64_t n = 0;
    for (const Interval& i : v) n += i.end - i.begin;
    return n;
  };
  b.compute_ns = len(compute);
  b.comm_total_ns = len(comm);
  b.overlap_ns = intersection_length(comm, compute);
  b.comm_ns = b.comm_total_ns - b.overlap_ns;
  std::vector<Interval> busy = compute;
  busy.insert(busy.end(), comm.begin(), comm.end());
  merge_intervals(busy);
  b.memcpy_ns = len(subtract(mem, busy));
  busy.insert(busy.end(), mem.begin(), mem.end());
  b.idle_ns = b.window_ns - union_length(busy);
  b.exposed_comm_ns = b.comm_ns;
  b.overlap_pct = b.comm_total_ns > 0 ? 100.0 * double(b.overlap_ns) / double(b.comm_total_ns) : 0.0;
  return b;
}

namespace {

// Keeps at most n points: per time bucket, the point with the highest allocated (peaks survive).
std::vector<MemoryPoint> decimate(const std::vector<MemoryPoint>& v, size_t n) {
  if (v.size() <= n || n < 2) return v;
  std::vector<MemoryPoint> out;
  const int64_t t0 = v.front().ts, span = std::max<int64_t>(1, v.back().ts - t0);
  int64_t bucket = -1;
  for (const MemoryPoint& p : v) {
    const int64_t b = int64_t((__int128)(p.ts - t0) * int64_t(n - 1) / span);
    if (b != bucket) {
      out.push_back(p);
      bucket = b;
    } else if (p.allocated > out.back().allocated || p.reserved > out.back().reserved) {
      out.back() = p;
    }
  }
  return out;
}

}  // namespace

Analysis analyze(const TraceSet& set, const AnalysisOptions& opt) {
  Analysis a;
  struct Coll {
    CollectiveStats st;
    std::vector<std::pair<uint32_t, CollectiveOnRank>> ranks;
  };
  std::map<std::pair<uint64_t, uint32_t>, Coll> colls;
  std::map<uint64_t, int> comm_size;  // comm_key -> size

  double overlap_sum = 0;
  __int128 exposed_sum = 0;
  for (const RankTrace& r : set.ranks) {
    const auto ranges = pair_ranges(r);
    const auto rc = collectives_of(r);
    const RankSpans spans = spans_of(r, ranges, rc);

    RankSummary rs;
    rs.rank = r.rank;
    rs.gpu_mode = spans.gpu_mode;
    rs.host = r.host;
    rs.events = r.events.size();
    rs.drops = r.drops;
    rs.begin_ns = r.begin_ns();
    rs.end_ns = r.end_ns();

    int64_t lo = INT64_MAX, hi = INT64_MIN;
    std::vector<const RangeSpan*> steps;
    for (const RangeSpan& s : ranges)
      if (s.phase == Phase::Step) {
        steps.push_back(&s);
        lo = std::min(lo, s.begin);
        hi = std::max(hi, s.end);
      }
    if (steps.empty()) {
      for (const auto* v : {&spans.compute, &spans.comm, &spans.memcpy})
        if (!v->empty()) {
          lo = std::min(lo, v->front().begin);
          hi = std::max(hi, v->back().end);
        }
    }
    if (lo < hi) rs.breakdown = breakdown_over(spans, lo, hi);

    std::vector<MemoryPoint> mem = memory_series(r);
    for (const MemoryPoint& p : mem) {
      rs.peak_allocated = std::max(rs.peak_allocated, p.allocated);
      rs.peak_reserved = std::max(rs.peak_reserved, p.reserved);
      rs.max_fragmentation = std::max(rs.max_fragmentation, p.fragmentation);
    }
    for (const Event& e : r.events) rs.ooms += e.kind == EventKind::Oom;

    // Step table.
    __int128 step_total = 0;
    size_t mem_i = 0;
    MemoryPoint carry{};
    for (const RangeSpan* s : steps) {
      StepRow row{};
      row.rank = r.rank;
      row.step = s->id;
      row.begin = s->begin;
      row.end = s->end;
      row.breakdown = breakdown_over(spans, s->begin, s->end);
      std::vector<Interval> waits;
      for (const RangeSpan& w : ranges)
        if (w.phase == Phase::DataWait && w.end > s->begin && w.begin < s->end)
          waits.push_back({std::max(w.begin, s->begin), std::min(w.end, s->end)});
      row.data_wait_ns = union_length(waits);
      while (mem_i < mem.size() && mem[mem_i].ts < s->begin) carry = mem[mem_i++];
      row.peak_allocated = carry.allocated;
      row.peak_reserved = carry.reserved;
      for (size_t k = mem_i; k < mem.size() && mem[k].ts <= s->end; ++k) {
        row.peak_allocated = std::max(row.peak_allocated, mem[k].allocated);
        row.peak_reserved = std::max(row.peak_reserved, mem[k].reserved);
      }
      step_total += s->end - s->begin;
      a.steps.push_back(row);
    }
    rs.steps = steps.size();
    rs.mean_step_ns = steps.empty() ? 0 : int64_t(step_total / __int128(steps.size()));

    for (const Event& e : r.events)
      if (e.kind == EventKind::CommInfo) {
        const auto ci = e.as<CommInfoEvent>();
        comm_size[ci.hash] = ci.size;
      }
    for (const CollectiveOnRank& c : rc) {
      Coll& x = colls[{c.comm_key, c.seq}];
      x.ranks.emplace_back(r.rank, c);
      rs.collectives++;
      rs.comm_bytes += c.bytes;
    }
    overlap_sum += rs.breakdown.overlap_pct;
    exposed_sum += rs.breakdown.exposed_comm_ns;
    a.drops += rs.drops;
    a.ranks.push_back(rs);
    a.memory.push_back(decimate(mem, opt.max_memory_points));
  }

  double bw_weighted = 0, bw_bytes = 0;
  for (auto& [key, x] : colls) {
    CollectiveStats& st = x.st;
    const CollectiveOnRank& c0 = x.ranks.front().second;
    st.comm_key = key.first;
    st.seq = key.second;
    st.op = c0.op;
    st.dtype = c0.dtype;
    st.bytes = c0.bytes;
    st.bucket = c0.bucket;
    st.ranks_seen = int(x.ranks.size());
    auto cs = comm_size.find(key.first);
    st.nranks = cs != comm_size.end() ? cs->second : 0;
    if (st.nranks == 0) {
      const RankTrace* rt = set.find_rank(x.ranks.front().first);
      st.nranks = std::max<int>(st.ranks_seen, rt ? int(rt->world_size) : 1);
    }
    st.first_start = INT64_MAX;
    st.last_start = INT64_MIN;
    st.last_end = INT64_MIN;
    st.straggler_rank = kUnknownRank;
    int64_t own_time = 0;
    for (auto& [rank, c] : x.ranks) {
      const int64_t b = c.start >= 0 ? c.start : c.enqueue;
      if (b < 0) continue;
      st.first_start = std::min(st.first_start, b);
      if (b > st.last_start) {
        st.last_start = b;
        st.straggler_rank = rank;
      }
      if (c.end >= 0) {
        st.last_end = std::max(st.last_end, c.end);
        own_time = c.end - b;
      }
    }
    if (st.first_start == INT64_MAX) st.first_start = st.last_start = 0;
    if (st.ranks_seen < 2) st.straggler_rank = kUnknownRank;
    st.skew_ns = st.last_start - st.first_start;
    st.time_ns = st.ranks_seen >= 2 && st.last_end > st.last_start ? st.last_end - st.last_start
                                                                   : std::max<int64_t>(own_time, 0);
    if (st.last_end == INT64_MIN) st.last_end = 0;
    st.algbw_gbps = st.time_ns > 0 ? double(st.bytes) / double(st.time_ns) : 0.0;  // bytes/ns == GB/s
    st.busbw_gbps = st.algbw_gbps * busbw_factor(st.op, st.nranks);
    if (st.time_ns > 0) {
      bw_weighted += st.busbw_gbps * double(st.bytes);
      bw_bytes += double(st.bytes);
    }
    a.max_skew_ns = std::max(a.max_skew_ns, st.skew_ns);
    a.collectives.push_back(st);
  }
  std::sort(a.collectives.begin(), a.collectives.end(), [](const CollectiveStats& x, const CollectiveStats& y) {
    return x.first_start != y.first_start ? x.first_start < y.first_start : x.seq < y.seq;
  });
  if (!a.ranks.empty()) {
    a.mean_overlap_pct = overlap_sum / double(a.ranks.size());
    a.mean_exposed_comm_ns = int64_t(exposed_sum / __int128(a.ranks.size()));
  }
  a.mean_busbw_gbps = bw_bytes > 0 ? bw_weighted / bw_bytes : 0.0;
  return a;
}

}  // namespace memcomm::prof
