#include <memcomm/view/builder.hpp>

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace memcomm::view {

namespace {

// Rows for spans that may nest (phases, NVTX): depth = number of enclosing open spans.
std::vector<std::vector<Span>> nest_rows(std::vector<Span>& spans) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.start != b.start ? a.start < b.start : a.end > b.end;
  });
  std::vector<std::vector<Span>> rows;
  std::vector<TimeNs> open;  // ends of the enclosing spans
  for (const Span& s : spans) {
    while (!open.empty() && open.back() <= s.start) open.pop_back();
    // A partial overlap (bad nesting) still lands on a row whose last span has ended, so rows
    // stay non-overlapping: the span that held this depth was popped, hence ended <= s.start.
    const std::size_t depth = open.size();
    if (rows.size() <= depth) rows.resize(depth + 1);
    rows[depth].push_back(s);
    open.push_back(s.end);
  }
  return rows;
}

// Rows for spans that should not overlap (one stream): overlaps spill into extra rows. The common
// case (recorded in order, no overlap) moves the vector as the one row, with no sort and no copy.
std::vector<std::vector<Span>> pack_rows(std::vector<Span>& spans) {
  const auto by_start = [](const Span& a, const Span& b) { return a.start < b.start; };
  if (!std::is_sorted(spans.begin(), spans.end(), by_start)) std::stable_sort(spans.begin(), spans.end(), by_start);
  bool overlaps = false;
  for (std::size_t i = 1; i < spans.size() && !overlaps; ++i) overlaps = spans[i].start < spans[i - 1].end;
  std::vector<std::vector<Span>> rows;
  if (!overlaps) {
    rows.push_back(std::move(spans));
    return rows;
  }
  for (const Span& s : spans) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const std::vector<Span>& r) { return r.back().end <= s.start; });
    if (it == rows.end()) {
      rows.emplace_back();
      it = rows.end() - 1;
    }
    it->push_back(s);
  }
  return rows;
}

// Shrinking copies the vector: only worth it when more than 1/8 of it is slack.
template <class V>
void shrink_if_slack(V& v) {
  if (v.capacity() - v.size() > v.size() / 8) v.shrink_to_fit();
}

void shrink(std::vector<std::vector<Span>>& rows) {
  for (auto& r : rows) shrink_if_slack(r);
  rows.shrink_to_fit();
}

// "allocated"/"active"/"reserved"/"largest_free"/"fragmentation" from the allocator event stream.
void derive_memory_counters(RankData& rd) {
  CounterSeries allocated("allocated", "B"), active("active", "B"), reserved("reserved", "B");
  CounterSeries largest("largest_free", "B"), frag("fragmentation", "");
  AllocatorState st;
  std::size_t since = 0;
  for (const auto& e : rd.alloc_events) {
    st.apply(e);
    if (e.op == AllocOp::Oom) rd.ooms.push_back(e.t);
    allocated.add(e.t, static_cast<double>(st.allocated));
    active.add(e.t, static_cast<double>(st.allocated + st.pending_free));
    reserved.add(e.t, static_cast<double>(st.reserved));
    // largest_free costs O(blocks): sample it at intervals that grow with the state, O(events) total.
    if (++since >= (st.block_count + st.segments.size()) / 4 || &e == &rd.alloc_events.back()) {
      since = 0;
      const double lf = static_cast<double>(st.largest_free());
      const double free_bytes = static_cast<double>(st.reserved - st.allocated - st.pending_free);
      largest.add(e.t, lf);
      frag.add(e.t, free_bytes > 0 ? 1.0 - lf / free_bytes : 0.0);
    }
  }
  for (auto* c : {&allocated, &active, &reserved, &largest, &frag}) {
    c->build_levels();
    c->shrink_to_fit();
    rd.counters.push_back(std::move(*c));
  }
}

// Per-category allocated bytes ("cat:parameter", ...) when the trace labels blocks.
void derive_category_counters(RankData& rd) {
  // Frees find their block's category by address (they may not carry it).
  bool labelled = false;
  for (const auto& e : rd.alloc_events) labelled = labelled || (e.op == AllocOp::Alloc && e.category != 0);
  if (!labelled) return;
  std::unordered_map<std::uint64_t, std::pair<std::uint8_t, std::uint64_t>> live;  // addr -> (category, size)
  double bytes[kMemCategoryCount] = {};
  std::vector<CounterSeries> cats;
  for (int c = 0; c < kMemCategoryCount; ++c) cats.emplace_back(std::string("cat:") + kMemCategoryNames[c], "B");
  for (const auto& e : rd.alloc_events) {
    int changed = -1;
    if (e.op == AllocOp::Alloc) {
      const std::uint8_t c = e.category < kMemCategoryCount ? e.category : 0;
      live[e.addr] = {c, e.size};
      bytes[c] += static_cast<double>(e.size);
      changed = c;
    } else if (e.op == AllocOp::FreeRequested || e.op == AllocOp::FreeCompleted) {
      auto it = live.find(e.addr);
      if (it == live.end()) continue;
      changed = it->second.first;
      bytes[changed] -= static_cast<double>(it->second.second);
      live.erase(it);
    }
    if (changed >= 0) cats[static_cast<std::size_t>(changed)].add(e.t, bytes[changed]);
  }
  for (auto& c : cats) {
    if (c.size() == 0) continue;
    c.build_levels();
    c.shrink_to_fit();
    rd.counters.push_back(std::move(c));
  }
}

}  // namespace

// Note [Prefaulting bulk arrays]: a 10 M-event load writes ~300 MB of fresh memory once; with
// 4 KiB pages that is ~75 k page faults, measured at ~20% of the load. MADV_POPULATE_WRITE
// (Linux >= 5.14) maps the part of an array not yet written in one call. MADV_HUGEPAGE was
// measured too: faster when 2 MiB pages are free (0.37 s against 0.55 s), but with Debian's
// defrag=madvise the kernel compacts memory on a busy machine and some loads took 1.2 s. Advisory:
// older kernels refuse it (EINVAL) and nothing changes.
void prefault_pages(const void* p, std::size_t bytes) {
#if defined(__linux__)
  constexpr int kPopulateWrite = 23;      // MADV_POPULATE_WRITE; older headers lack the name
  constexpr std::uintptr_t kHuge = 2u << 20;  // whole 2 MiB runs only: small arrays are not worth a call
  const auto a = (reinterpret_cast<std::uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const auto b = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (b > a) (void)madvise(reinterpret_cast<void*>(a), b - a, kPopulateWrite);
#else
  (void)p;
  (void)bytes;
#endif
}

void TimelineBuilder::phase(std::uint32_t r, std::string_view name, TimeNs start, TimeNs end) {
  rank(r).phases.push_back({start, std::max(start, end), strings_.intern(name), 0});
  ++events_;
}
void TimelineBuilder::nvtx(std::uint32_t r, std::string_view name, TimeNs start, TimeNs end) {
  rank(r).nvtx.push_back({start, std::max(start, end), strings_.intern(name), 0});
  ++events_;
}
void TimelineBuilder::kernel(std::uint32_t r, std::uint32_t stream, std::string_view name, TimeNs start, TimeNs end) {
  span(r, LaneKind::Kernel, stream, strings_.intern(name), start, end);
}
void TimelineBuilder::memcpy(std::uint32_t r, std::uint32_t stream, std::string_view name, TimeNs start, TimeNs end) {
  span(r, LaneKind::Memcpy, stream, strings_.intern(name), start, end);
}
void TimelineBuilder::memset(std::uint32_t r, std::uint32_t stream, TimeNs start, TimeNs end) {
  span(r, LaneKind::Memset, stream, strings_.intern("memset"), start, end);
}
void TimelineBuilder::collective(std::uint32_t r, std::string_view op, std::uint64_t bytes, std::uint32_t comm,
                                 std::uint64_t seq, TimeNs start, TimeNs end, std::uint32_t world) {
  Collective c;
  c.bytes = bytes;
  c.op = strings_.intern(op);
  c.comm = comm;
  c.seq = seq;
  c.start = start;
  c.end = std::max(start, end);
  c.group_size = world;
  rank(r).collectives.push_back(c);
  ++events_;
}
void TimelineBuilder::counter(std::uint32_t r, std::string_view name, TimeNs t, double value, std::string_view unit) {
  auto& m = rank(r).counters;
  auto it = m.find(std::string(name));
  if (it == m.end()) it = m.emplace(std::string(name), CounterSeries(std::string(name), std::string(unit))).first;
  it->second.add(t, value);
  ++events_;
}
void TimelineBuilder::alloc_event(std::uint32_t r, const AllocEvent& e) {
  rank(r).alloc.push_back(e);
  ++events_;
}
void TimelineBuilder::span(std::uint32_t r, LaneKind kind, std::uint32_t stream, std::uint32_t name, TimeNs start,
                           TimeNs end, std::uint32_t payload) {
  RankParts& p = rank(r);
  const Span s{start, std::max(start, end), name, payload};
  ++events_;
  if (kind == LaneKind::Phase) return p.phases.push_back(s);
  if (kind == LaneKind::Nvtx) return p.nvtx.push_back(s);
  const std::tuple<std::uint8_t, std::uint32_t> key{static_cast<std::uint8_t>(kind), stream};
  if (last_stream_ == nullptr || last_stream_key_ != key) {
    last_stream_ = &p.streams[key];
    last_stream_key_ = key;
  }
  last_stream_->push_back(s);
}
std::vector<Span>& TimelineBuilder::lane_spans(std::uint32_t r, LaneKind kind, std::uint32_t stream) {
  RankParts& p = rank(r);
  if (kind == LaneKind::Phase) return p.phases;
  if (kind == LaneKind::Nvtx) return p.nvtx;
  return p.streams[{static_cast<std::uint8_t>(kind), stream}];
}
CounterSeries& TimelineBuilder::counter_series(std::uint32_t r, std::string_view name, std::string_view unit) {
  auto& m = rank(r).counters;
  auto it = m.find(std::string(name));
  if (it == m.end()) it = m.emplace(std::string(name), CounterSeries(std::string(name), std::string(unit))).first;
  return it->second;
}
void TimelineBuilder::reserve_scaled(std::uint32_t r, double factor) {
  if (!(factor > 1.0)) return;
  const auto grow = [factor](auto& v) {
    if (v.empty()) return;
    v.reserve(static_cast<std::size_t>(static_cast<double>(v.size()) * factor) + 16);
    prefault_pages(v.data() + v.size(), (v.capacity() - v.size()) * sizeof(v[0]));
  };
  RankParts& p = rank(r);
  grow(p.phases);
  grow(p.nvtx);
  grow(p.collectives);
  grow(p.alloc);
  for (auto& [key, v] : p.streams) grow(v);
  for (auto& [name, c] : p.counters)
    if (c.size()) c.reserve(static_cast<std::size_t>(static_cast<double>(c.size()) * factor) + 16);
}
void TimelineBuilder::dropped(std::uint32_t r, std::uint64_t n) { rank(r).dropped += n; }
void TimelineBuilder::host(std::uint32_t r, std::string_view h) { rank(r).host = std::string(h); }
void TimelineBuilder::reserve(std::uint32_t r, LaneKind kind, std::uint32_t stream, std::size_t n) {
  RankParts& p = rank(r);
  if (kind == LaneKind::Phase) p.phases.reserve(p.phases.size() + n);
  else if (kind == LaneKind::Nvtx) p.nvtx.reserve(p.nvtx.size() + n);
  else if (kind == LaneKind::Collective) p.collectives.reserve(p.collectives.size() + n);
  else {
    auto& v = p.streams[{static_cast<std::uint8_t>(kind), stream}];
    v.reserve(v.size() + n);
  }
}
void TimelineBuilder::reserve_alloc(std::uint32_t r, std::size_t n) {
  auto& v = rank(r).alloc;
  v.reserve(v.size() + n);
}

Timeline TimelineBuilder::finish(std::string source) {
  Timeline tl;
  tl.strings = std::move(strings_);
  tl.sources.push_back(std::move(source));
  tl.event_count = events_;
  TimeNs lo = INT64_MAX, hi = INT64_MIN;
  auto bound = [&](TimeNs a, TimeNs b) {
    lo = std::min(lo, a);
    hi = std::max(hi, b);
  };
  for (auto& [r, parts] : ranks_) {
    RankData rd;
    rd.rank = r;
    rd.host = parts.host;
    rd.dropped = parts.dropped;
    if (!parts.phases.empty()) {
      Lane lane{"phases", LaneKind::Phase, 0, nest_rows(parts.phases)};
      shrink(lane.rows);
      rd.lanes.push_back(std::move(lane));
    }
    if (!parts.nvtx.empty()) {
      Lane lane{"nvtx", LaneKind::Nvtx, 0, nest_rows(parts.nvtx)};
      shrink(lane.rows);
      rd.lanes.push_back(std::move(lane));
    }
    for (auto& [key, spans] : parts.streams) {
      const auto kind = static_cast<LaneKind>(std::get<0>(key));
      const auto stream = std::get<1>(key);
      Lane lane{std::string(lane_kind_name(kind)) + " s" + std::to_string(stream), kind, stream, pack_rows(spans)};
      shrink(lane.rows);
      rd.lanes.push_back(std::move(lane));
    }
    std::vector<Span>().swap(parts.phases);
    parts.streams.clear();
    if (!parts.collectives.empty()) {
      auto& cs = parts.collectives;
      std::sort(cs.begin(), cs.end(), [](const Collective& a, const Collective& b) { return a.start < b.start; });
      std::vector<Span> spans;
      spans.reserve(cs.size());
      for (std::size_t i = 0; i < cs.size(); ++i)
        spans.push_back({cs[i].start, cs[i].end, cs[i].op, static_cast<std::uint32_t>(i)});
      Lane lane{"collectives", LaneKind::Collective, 0, pack_rows(spans)};
      shrink(lane.rows);
      rd.lanes.push_back(std::move(lane));
      rd.collectives = std::move(cs);
      shrink_if_slack(rd.collectives);
    }
    for (const auto& lane : rd.lanes)
      for (const auto& row : lane.rows)
        if (!row.empty()) bound(row.front().start, row.back().end);
    const auto by_time = [](const AllocEvent& a, const AllocEvent& b) { return a.t < b.t; };
    if (!std::is_sorted(parts.alloc.begin(), parts.alloc.end(), by_time))
      std::stable_sort(parts.alloc.begin(), parts.alloc.end(), by_time);
    rd.alloc_events = std::move(parts.alloc);
    shrink_if_slack(rd.alloc_events);
    if (!rd.alloc_events.empty()) bound(rd.alloc_events.front().t, rd.alloc_events.back().t);
    const bool has_memory_samples = parts.counters.count("allocated") || parts.counters.count("reserved");
    for (auto& [name, series] : parts.counters) {
      // Samples from several threads may interleave: sort by time (stable keeps equal-time order).
      bool sorted_in = true;
      for (std::size_t i = 1; i < series.size() && sorted_in; ++i) sorted_in = series.time(i - 1) <= series.time(i);
      if (!sorted_in) {
        std::vector<std::pair<TimeNs, double>> tv;
        tv.reserve(series.size());
        for (std::size_t i = 0; i < series.size(); ++i) tv.emplace_back(series.time(i), series.value(i));
        std::stable_sort(tv.begin(), tv.end(), [](auto& a, auto& b) { return a.first < b.first; });
        CounterSeries sorted(series.name(), series.unit());
        for (auto& [t, v] : tv) sorted.add(t, v);
        series = std::move(sorted);
      }
      if (series.size()) bound(series.time(0), series.time(series.size() - 1));
      series.build_levels();
      series.shrink_to_fit();
      rd.counters.push_back(std::move(series));
    }
    if (!rd.alloc_events.empty()) derive_category_counters(rd);
    if (!has_memory_samples && !rd.alloc_events.empty()) derive_memory_counters(rd);
    else
      for (const auto& e : rd.alloc_events)
        if (e.op == AllocOp::Oom) rd.ooms.push_back(e.t);
    tl.ranks.push_back(std::move(rd));
  }
  ranks_.clear();
  last_ = nullptr;
  last_stream_ = nullptr;
  events_ = 0;
  tl.begin = lo <= hi ? lo : 0;
  tl.end = lo <= hi ? hi : 0;
  match_collectives(tl);
  return tl;
}

double busbw_factor(std::string_view op, std::uint32_t n) {
  if (n <= 1) return 1.0;
  const double f = static_cast<double>(n - 1) / n;
  if (op.find("all_reduce") != std::string_view::npos || op.find("allreduce") != std::string_view::npos) return 2 * f;
  if (op.find("all_gather") != std::string_view::npos || op.find("allgather") != std::string_view::npos ||
      op.find("reduce_scatter") != std::string_view::npos || op.find("reducescatter") != std::string_view::npos ||
      op.find("all_to_all") != std::string_view::npos || op.find("alltoall") != std::string_view::npos)
    return f;
  return 1.0;  // broadcast, reduce, send/recv
}

void match_collectives(Timeline& tl) {
  struct Ref {
    std::uint32_t rank_slot;
    std::uint32_t index;
  };
  std::unordered_map<std::uint64_t, std::vector<Ref>> groups;  // key: comm * 2^40 + seq
  for (std::uint32_t s = 0; s < tl.ranks.size(); ++s) {
    auto& cs = tl.ranks[s].collectives;
    for (std::uint32_t i = 0; i < cs.size(); ++i)
      groups[(static_cast<std::uint64_t>(cs[i].comm) << 40) ^ cs[i].seq].push_back({s, i});
  }
  const auto world = static_cast<std::uint32_t>(std::max<std::size_t>(1, tl.ranks.size()));
  for (auto& [key, refs] : groups) {
    (void)key;
    TimeNs first = INT64_MAX, last = INT64_MIN;
    std::size_t last_ref = 0;
    for (std::size_t k = 0; k < refs.size(); ++k) {
      const auto& c = tl.ranks[refs[k].rank_slot].collectives[refs[k].index];
      first = std::min(first, c.start);
      if (c.start > last) {
        last = c.start;
        last_ref = k;
      }
    }
    for (std::size_t k = 0; k < refs.size(); ++k) {
      auto& c = tl.ranks[refs[k].rank_slot].collectives[refs[k].index];
      const std::uint32_t n = refs.size() > 1 ? static_cast<std::uint32_t>(refs.size())
                                              : (c.group_size ? c.group_size : world);
      if (refs.size() > 1) c.group_size = n;
      c.straggler = refs.size() > 1 && k == last_ref;
      c.skew = last - first;
      const double secs = std::max<TimeNs>(1, c.end - c.start) * 1e-9;
      c.algbw = static_cast<double>(c.bytes) / secs / 1e9;
      c.busbw = c.algbw * busbw_factor(tl.strings.get(c.op), n);
      if (k + 1 < refs.size()) {
        c.next_rank = static_cast<std::int32_t>(refs[k + 1].rank_slot);
        c.next_index = refs[k + 1].index;
      } else {
        c.next_rank = -1;
      }
    }
  }
}

}  // namespace memcomm::view
