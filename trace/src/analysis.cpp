// The analysis: see Note [Breakdown definitions], Note [Collective bandwidth] and Note [One
// analysis engine] in analysis.hpp. analyze() walks each rank once (its ranges, collectives, spans
// and memory series), builds its summary and step rows, gathers every rank's part of each
// collective by (communicator, seq), then times the matched collectives and takes the means.
#include "memcomm/trace/analysis.hpp"
#include "memcomm/trace/kineto.hpp"
#include "memcomm/trace/range_pairing.hpp"

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
      const auto k = range_closed_by(stack, en.phase, [&](size_t i) { return out[i].phase; });  // Note [Pairing a range's end]
      if (!k) continue;
      out[stack[*k]].end = en.ts;
      out[stack[*k]].closed = true;
      stack.erase(stack.begin() + static_cast<std::ptrdiff_t>(*k));
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

bool coll_op_from_name(std::string_view name, CollOp& op) {
  for (int i = 0; i <= int(CollOp::Scatter); ++i)
    if (name == coll_op_name(CollOp(i))) {
      op = CollOp(i);
      return true;
    }
  return false;
}

CollectiveTiming collective_timing(const std::vector<CollectiveArrival>& arrivals, CollOp op, uint64_t bytes,
                                   int nranks) {
  CollectiveTiming t;
  t.first_start = INT64_MAX;
  t.last_start = INT64_MIN;
  t.last_end = INT64_MIN;
  int64_t own_time = 0;
  for (const CollectiveArrival& a : arrivals) {
    if (a.start < 0) continue;
    t.first_start = std::min(t.first_start, a.start);
    if (a.start > t.last_start) {
      t.last_start = a.start;
      t.straggler_rank = a.rank;
    }
    if (a.end >= 0) {
      t.last_end = std::max(t.last_end, a.end);
      own_time = a.end - a.start;
    }
  }
  if (t.first_start == INT64_MAX) t.first_start = t.last_start = 0;
  const bool matched = arrivals.size() >= 2;
  if (!matched) t.straggler_rank = kUnknownRank;
  t.skew_ns = t.last_start - t.first_start;
  t.time_ns = matched && t.last_end > t.last_start ? t.last_end - t.last_start : std::max<int64_t>(own_time, 0);
  if (t.last_end == INT64_MIN) t.last_end = 0;
  t.algbw_gbps = t.time_ns > 0 ? double(bytes) / double(t.time_ns) : 0.0;  // bytes/ns == GB/s
  t.busbw_gbps = t.algbw_gbps * busbw_factor(op, nranks);
  return t;
}

bool runs_operators(uint16_t thread) { return (thread & kPythonFrameThreadBase) == 0; }

// The host ranges (Phase::Custom: the operators, not their annotations) of each thread, less the time
// that thread spent in a communication call (Phase::Comm: a Gloo op, or the c10d:: operator that
// issued one) inside them: an operator that waits on Gloo computes nothing meanwhile, while another
// thread's work goes on.
std::vector<Interval> operators_outside_comm(const std::vector<RangeSpan>& ranges) {
  std::map<uint16_t, std::pair<std::vector<Interval>, std::vector<Interval>>> by_thread;
  for (const RangeSpan& rs : ranges) {
    if (!runs_operators(rs.thread)) continue;
    if (rs.phase == Phase::Custom) by_thread[rs.thread].first.push_back({rs.begin, rs.end});
    if (rs.phase == Phase::Comm) by_thread[rs.thread].second.push_back({rs.begin, rs.end});
  }
  std::vector<Interval> out;
  for (auto& [thread, spans] : by_thread) {
    merge_intervals(spans.first);
    merge_intervals(spans.second);
    for (const Interval& i : subtract(spans.first, spans.second)) out.push_back(i);
  }
  return out;
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
      s.gpu_mode = true;  // a device's timeline, though its kernels went unrecorded
      const auto k = e.as<ComputeEvent>();
      s.memcpy.push_back({k.ts, k.end()});
    }
  }
  if (!s.gpu_mode) {
    std::vector<Interval> waits;  // comm phases: DDP's wait inside a Python backward, the trainer's after it
    for (const RangeSpan& rs : ranges) {
      if (is_compute_phase(rs.phase)) s.compute.push_back({rs.begin, rs.end});
      if (rs.phase == Phase::Comm) waits.push_back({rs.begin, rs.end});
    }
    // See Note [Breakdown definitions]: a CPU run that marks no phase (a torch.profiler trace of a CPU
    // script without ProfilerStep) has only its host ranges, the operators it ran.
    if (s.compute.empty()) {
      s.compute = operators_outside_comm(ranges);
    } else {
      merge_intervals(s.compute);
      merge_intervals(waits);
      s.compute = subtract(s.compute, waits);
    }
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

uint64_t kernel_launches_without_kernels(const RankTrace& r) {
  uint64_t launches = 0;
  for (const Event& e : r.events) {
    if (e.kind == EventKind::Kernel) return 0;
    if (e.kind == EventKind::Launch && r.name(e.as<ComputeEvent>().arg).find("Launch") != std::string_view::npos) ++launches;
  }
  return launches;
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
  const CommOverlap co = comm_overlap(comm, compute);
  b.comm_total_ns = co.comm_total_ns;
  b.overlap_ns = co.overlap_ns;
  b.comm_ns = co.exposed_comm_ns;
  std::vector<Interval> busy = compute;
  busy.insert(busy.end(), comm.begin(), comm.end());
  merge_intervals(busy);
  b.memcpy_ns = len(subtract(mem, busy));
  busy.insert(busy.end(), mem.begin(), mem.end());
  b.idle_ns = b.window_ns - union_length(busy);
  b.exposed_comm_ns = co.exposed_comm_ns;
  b.overlap_pct = co.overlap_pct;
  return b;
}

CommOverlap comm_overlap(const std::vector<Interval>& comm, const std::vector<Interval>& compute) {
  CommOverlap c;
  for (const Interval& i : comm) c.comm_total_ns += i.end - i.begin;
  c.overlap_ns = intersection_length(comm, compute);
  c.exposed_comm_ns = c.comm_total_ns - c.overlap_ns;
  c.overlap_pct = c.comm_total_ns > 0 ? 100.0 * double(c.overlap_ns) / double(c.comm_total_ns) : 0.0;
  return c;
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


namespace {

// Every rank's part of one collective, gathered by (communicator, seq).
struct CollectiveParts {
  std::vector<std::pair<uint32_t, CollectiveOnRank>> ranks;
};
using CollectiveMap = std::map<std::pair<uint64_t, uint32_t>, CollectiveParts>;

// The window of the rank's breakdown (Note [Breakdown definitions]): its steps, else its spans.
std::pair<int64_t, int64_t> breakdown_window(const std::vector<const RangeSpan*>& steps, const RankSpans& spans) {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const RangeSpan* s : steps) {
    lo = std::min(lo, s->begin);
    hi = std::max(hi, s->end);
  }
  if (steps.empty()) {
    for (const auto* v : {&spans.compute, &spans.comm, &spans.memcpy})
      if (!v->empty()) {
        lo = std::min(lo, v->front().begin);
        hi = std::max(hi, v->back().end);
      }
  }
  return {lo, hi};
}

// One step's row. `mem_i` and `carry` walk the memory series forward across the rank's steps
// (in begin order): the peak is the value in force at the step's begin and every point up to its end.
StepRow step_row(const RankTrace& r, const RangeSpan& s, const std::vector<RangeSpan>& ranges, const RankSpans& spans,
                 const std::vector<MemoryPoint>& mem, size_t& mem_i, MemoryPoint& carry) {
  StepRow row{};
  row.rank = r.rank;
  row.step = s.id;
  row.begin = s.begin;
  row.end = s.end;
  row.breakdown = breakdown_over(spans, s.begin, s.end);
  std::vector<Interval> waits;
  for (const RangeSpan& w : ranges) {
    if (w.phase == Phase::DataWait && w.end > s.begin && w.begin < s.end)
      waits.push_back({std::max(w.begin, s.begin), std::min(w.end, s.end)});
    if (w.phase == Phase::MicroStep && w.begin >= s.begin && w.begin < s.end) ++row.micro_steps;
  }
  row.data_wait_ns = union_length(waits);
  while (mem_i < mem.size() && mem[mem_i].ts < s.begin) carry = mem[mem_i++];
  row.peak_allocated = carry.allocated;
  row.peak_reserved = carry.reserved;
  for (size_t k = mem_i; k < mem.size() && mem[k].ts <= s.end; ++k) {
    row.peak_allocated = std::max(row.peak_allocated, mem[k].allocated);
    row.peak_reserved = std::max(row.peak_reserved, mem[k].reserved);
  }
  return row;
}

// The rank's data waits, wherever they lie (RankSummary::data_waits).
void count_data_waits(const std::vector<RangeSpan>& ranges, RankSummary& rs) {
  std::vector<Interval> waits;
  const RangeSpan* first = nullptr;
  for (const RangeSpan& w : ranges)
    if (w.phase == Phase::DataWait && w.end > w.begin) {
      waits.push_back({w.begin, w.end});
      if (!first || w.begin < first->begin) first = &w;
    }
  rs.data_waits = waits.size();
  rs.data_wait_ns = union_length(waits);
  if (first) rs.first_data_wait_ns = first->end - first->begin, rs.first_data_wait_end = first->end;
}

// One rank: its summary, its step rows (appended to a.steps) and its memory series; its
// collectives join `colls` and its communicators' sizes `comm_size`.
RankSummary analyze_rank(const RankTrace& r, const AnalysisOptions& opt, Analysis& a, CollectiveMap& colls,
                         std::map<uint64_t, int>& comm_size) {
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
  // Note [A step the trace cut off]: a step whose end the trace lacks (the recording was killed or cut
  // short during it) is a fragment, not a step: report counted it (241 steps where the viewer showed
  // 240, its time half a step's, in the mean), so it is left out and counted apart.
  std::vector<const RangeSpan*> steps;
  for (const RangeSpan& s : ranges)
    if (s.phase == Phase::Step) {
      if (s.closed) steps.push_back(&s);
      else ++rs.unfinished_steps;
    }
  const auto [lo, hi] = breakdown_window(steps, spans);
  if (lo < hi) rs.breakdown = breakdown_over(spans, lo, hi);
  count_data_waits(ranges, rs);

  std::vector<MemoryPoint> mem = memory_series(r);
  rs.memory_recorded = !mem.empty();
  for (const MemoryPoint& p : mem) {
    rs.peak_allocated = std::max(rs.peak_allocated, p.allocated);
    rs.peak_reserved = std::max(rs.peak_reserved, p.reserved);
    rs.max_fragmentation = std::max(rs.max_fragmentation, p.fragmentation);
  }
  for (const Event& e : r.events) {
    rs.reserved_recorded |= is_segment_kind(e.kind) ||
                            (e.kind == EventKind::MemSample && e.as<MemSampleEvent>().metric == MemMetric::Reserved);
    rs.ooms += e.kind == EventKind::Oom;
    if (e.kind == EventKind::CommInfo) comm_size[e.as<CommInfoEvent>().hash] = e.as<CommInfoEvent>().size;
  }
  __int128 step_total = 0;
  size_t mem_i = 0;
  MemoryPoint carry{};
  for (const RangeSpan* s : steps) {
    a.steps.push_back(step_row(r, *s, ranges, spans, mem, mem_i, carry));
    step_total += s->end - s->begin;
  }
  rs.steps = steps.size();
  rs.mean_step_ns = steps.empty() ? 0 : int64_t(step_total / __int128(steps.size()));
  for (const CollectiveOnRank& c : rc) {
    colls[{c.comm_key, c.seq}].ranks.emplace_back(r.rank, c);
    rs.collectives++;
    rs.comm_bytes += c.bytes;
  }
  a.memory.push_back(decimate(mem, opt.max_memory_points));
  return rs;
}

// Note [Collectives the ranks disagree on]
// Collectives are matched across ranks by communicator and order, which is exact when every rank
// records every collective of a communicator. Two kinds of input break that without any error: a
// torch.profiler trace of Gloo puts every process group on one communicator (its spans name none), so
// a sub-group's collectives pair with another group's; and traces that begin at different steps pair
// step 2 of one rank with step 3 of another. The pairs then name different ops, or different sizes
// for an op whose size is the same on every rank (an all-to-all, a gather or a scatter may differ),
// which one collective never does. Such a match is marked and counted, the report says so and marks
// its row, and its skew, straggler and bandwidth stay out of the summary and the advice.
bool same_size_everywhere(CollOp op) {
  return op == CollOp::AllReduce || op == CollOp::AllGather || op == CollOp::ReduceScatter ||
         op == CollOp::Broadcast || op == CollOp::Reduce;
}

// One matched collective's figures (Note [Collective bandwidth]).
CollectiveStats collective_stats(const TraceSet& set, std::pair<uint64_t, uint32_t> key, const CollectiveParts& x,
                                 const std::map<uint64_t, int>& comm_size) {
  CollectiveStats st{};
  const CollectiveOnRank& c0 = x.ranks.front().second;
  st.comm_key = key.first;
  st.seq = key.second;
  st.op = c0.op;
  st.dtype = c0.dtype;
  st.bytes = c0.bytes;
  st.bucket = c0.bucket;
  st.ranks_seen = int(x.ranks.size());
  st.ranks_disagree = std::any_of(x.ranks.begin(), x.ranks.end(), [&c0](const auto& rc) {
    return instances_disagree(c0.op, c0.bytes, rc.second.op, rc.second.bytes);
  });
  auto cs = comm_size.find(key.first);
  st.nranks = cs != comm_size.end() ? cs->second : 0;
  if (st.nranks == 0) {
    const RankTrace* rt = set.find_rank(x.ranks.front().first);
    st.nranks = std::max<int>(st.ranks_seen, rt ? int(rt->world_size) : 1);
  }
  std::vector<CollectiveArrival> arrivals;
  arrivals.reserve(x.ranks.size());
  for (const auto& [rank, c] : x.ranks) arrivals.push_back({rank, c.start >= 0 ? c.start : c.enqueue, c.end});
  const CollectiveTiming t = collective_timing(arrivals, st.op, st.bytes, st.nranks);
  st.first_start = t.first_start;
  st.last_start = t.last_start;
  st.last_end = t.last_end;
  st.time_ns = t.time_ns;
  st.algbw_gbps = t.algbw_gbps;
  st.busbw_gbps = t.busbw_gbps;
  st.skew_ns = t.skew_ns;
  st.straggler_rank = t.straggler_rank;
  return st;
}

}  // namespace

bool instances_disagree(CollOp first_op, uint64_t first_bytes, CollOp op, uint64_t bytes) {
  return op != first_op || (same_size_everywhere(first_op) && bytes != 0 && first_bytes != 0 && bytes != first_bytes);
}

Analysis analyze(const TraceSet& set, const AnalysisOptions& opt) {
  Analysis a;
  CollectiveMap colls;
  std::map<uint64_t, int> comm_size;  // comm_key -> size
  double overlap_sum = 0;
  __int128 exposed_sum = 0;
  for (const RankTrace& r : set.ranks) {
    a.ranks.push_back(analyze_rank(r, opt, a, colls, comm_size));
    overlap_sum += a.ranks.back().breakdown.overlap_pct;
    exposed_sum += a.ranks.back().breakdown.exposed_comm_ns;
    a.drops += a.ranks.back().drops;
  }
  BusbwMean busbw;
  for (const auto& [key, x] : colls) {
    a.collectives.push_back(collective_stats(set, key, x, comm_size));
    const CollectiveStats& st = a.collectives.back();
    a.disagreeing_collectives += st.ranks_disagree;
    if (st.ranks_disagree) continue;  // Note [Collectives the ranks disagree on]
    busbw.add(st.busbw_gbps, st.bytes, st.time_ns);
    a.max_skew_ns = std::max(a.max_skew_ns, st.skew_ns);
  }
  std::sort(a.collectives.begin(), a.collectives.end(), [](const CollectiveStats& x, const CollectiveStats& y) {
    return x.first_start != y.first_start ? x.first_start < y.first_start : x.seq < y.seq;
  });
  if (!a.ranks.empty()) {
    a.mean_overlap_pct = overlap_sum / double(a.ranks.size());
    a.mean_exposed_comm_ns = int64_t(exposed_sum / __int128(a.ranks.size()));
  }
  a.mean_busbw_gbps = busbw.value();
  a.busbw_known = busbw.known();
  return a;
}

}  // namespace memcomm::prof
