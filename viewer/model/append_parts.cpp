// The row and series merges behind TimelineBuilder::append_to() (Note [Incremental append] in
// timeline_append.cpp): each takes new spans or samples into a published lane or counter.
#include "append_parts.hpp"

#include <algorithm>
#include <cstdint>

namespace memcomm::view {

namespace {

// Processing order of nested spans: by start, enclosing (longer) first; name and payload make the
// order total, so the rows do not depend on arrival order.
bool nest_less(const Span& a, const Span& b) {
  if (a.start != b.start) return a.start < b.start;
  if (a.end != b.end) return a.end > b.end;
  if (a.name != b.name) return a.name < b.name;
  return a.payload < b.payload;
}
// A total order for spans that arrived out of order (same reason as nest_less).
bool span_less(const Span& a, const Span& b) {
  if (a.start != b.start) return a.start < b.start;
  if (a.end != b.end) return a.end < b.end;
  if (a.name != b.name) return a.name < b.name;
  return a.payload < b.payload;
}

// Depth = number of enclosing open spans; `open` holds their ends (the stack of the walk so far).
void nest_into(std::vector<SpanRow>& rows, std::vector<TimeNs>& open, const std::vector<Span>& sorted) {
  for (const Span& s : sorted) {
    while (!open.empty() && open.back() <= s.start) open.pop_back();
    // A partial overlap (bad nesting) still lands on a row whose last span has ended, so rows
    // stay non-overlapping: the span that held this depth was popped, hence ended <= s.start.
    const std::size_t depth = open.size();
    if (rows.size() <= depth) rows.resize(depth + 1);
    rows[depth].push_back(s);
    open.push_back(s.end);
  }
}

// First-fit onto rows whose last span has ended; `sorted` by start, starting at or after every
// span already on the rows, so the result is what packing everything at once gives.
template <class Spans>
void pack_onto(std::vector<SpanRow>& rows, const Spans& sorted) {
  for (const Span& s : sorted) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const SpanRow& r) { return r.back().end <= s.start; });
    if (it == rows.end()) {
      rows.emplace_back();
      it = rows.end() - 1;
    }
    it->push_back(s);
  }
}

// Lane order in RankData::lanes: phases, NVTX by thread, streams by (kind, stream), collectives.
std::tuple<int, int, std::uint32_t> lane_order(LaneKind kind, std::uint32_t stream) {
  const int group = kind == LaneKind::Phase ? 0 : kind == LaneKind::Nvtx ? 1 : kind == LaneKind::Collective ? 3 : 2;
  return {group, group == 2 ? static_cast<int>(kind) : 0, group == 1 || group == 2 ? stream : 0};
}

}  // namespace

// Nested lanes (phases, NVTX): see Note [Incremental append].
void merge_nested(Lane& lane, SpanRow& fresh) {
  std::vector<Span> sorted(fresh.begin(), fresh.end());  // contiguous for the sort
  std::sort(sorted.begin(), sorted.end(), nest_less);
  auto& rows = lane.rows;
  std::vector<TimeNs> open;
  if (rows.empty()) {
    nest_into(rows, open, sorted);
    return;
  }
  const TimeNs t_min = sorted.front().start;
  std::vector<Span> redo;
  for (auto& row : rows) {
    auto cut = std::lower_bound(row.begin(), row.end(), t_min, [](const Span& s, TimeNs t) { return s.start < t; });
    redo.insert(redo.end(), cut, row.end());
    row.truncate(cut.index());
  }
  // A span outlives its parent's cut only if the parent started earlier, so only trailing rows empty.
  while (!rows.empty() && rows.back().empty()) rows.pop_back();
  // The walk's stack before the first redone span: the last span walked and the last span of each
  // row above it (the spans open when it was pushed).
  std::size_t last = SIZE_MAX;
  for (std::size_t d = 0; d < rows.size(); ++d)
    if (last == SIZE_MAX || !nest_less(rows[d].back(), rows[last].back())) last = d;
  if (last != SIZE_MAX)
    for (std::size_t d = 0; d <= last; ++d) open.push_back(rows[d].back().end);
  redo.insert(redo.end(), sorted.begin(), sorted.end());
  std::sort(redo.begin(), redo.end(), nest_less);
  nest_into(rows, open, redo);
}

// Lanes of spans that should not overlap (one stream): overlaps spill into extra rows. The common
// case of a fresh lane (recorded in order, no overlap) moves the vector in as the one row.
std::pair<TimeNs, TimeNs> merge_packed(Lane& lane, SpanRow& fresh) {
  // One pass for "sorted?", "overlapping?" and the bounds: these arrays are the bulk of a load.
  bool sorted = true, overlaps = false;
  TimeNs lo = INT64_MAX, hi = INT64_MIN;
  TimeNs prev_start = INT64_MIN, prev_end = INT64_MIN;
  fresh.for_each_chunk([&](const Span* s, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      lo = std::min(lo, s[i].start);
      hi = std::max(hi, s[i].end);
      sorted = sorted && prev_start <= s[i].start;
      overlaps = overlaps || s[i].start < prev_end;
      prev_start = s[i].start;
      prev_end = s[i].end;
    }
  });
  const std::pair<TimeNs, TimeNs> bounds{lo, hi};
  if (!sorted) {
    std::sort(fresh.begin(), fresh.end(), span_less);
    overlaps = true;  // not known any more; pack_onto finds out
  }
  auto& rows = lane.rows;
  if (rows.empty()) {
    if (!overlaps) {
      rows.push_back(std::move(fresh));
      fresh = SpanRow();
      return bounds;
    }
    pack_onto(rows, fresh);
    return bounds;
  }
  TimeNs last_start = INT64_MIN;
  for (const auto& r : rows) last_start = std::max(last_start, r.back().start);
  if (fresh.front().start >= last_start) {
    pack_onto(rows, fresh);
    return bounds;
  }
  std::vector<Span> all;  // a late span: re-pack the lane
  for (const auto& r : rows) all.insert(all.end(), r.begin(), r.end());
  all.insert(all.end(), fresh.begin(), fresh.end());
  std::sort(all.begin(), all.end(), span_less);
  rows.clear();
  pack_onto(rows, all);
  return bounds;
}

Lane& lane_for(RankData& rd, LaneKind kind, std::uint32_t stream) {
  const auto key = lane_order(kind, stream);
  auto it = std::lower_bound(rd.lanes.begin(), rd.lanes.end(), key,
                             [](const Lane& l, const auto& k) { return lane_order(l.kind, l.stream) < k; });
  if (it != rd.lanes.end() && lane_order(it->kind, it->stream) == key) return *it;
  Lane lane;
  lane.kind = kind;
  lane.stream = std::get<2>(key);
  lane.name = kind == LaneKind::Phase         ? "phases"
              : kind == LaneKind::Nvtx       ? (stream == 0 ? std::string("nvtx") : "nvtx t" + std::to_string(stream))
              : kind == LaneKind::Collective ? "collectives"
                                             : std::string(lane_kind_name(kind)) + " s" + std::to_string(stream);
  return *rd.lanes.insert(it, std::move(lane));
}

CounterSeries& counter_for(RankData& rd, const std::string& name, const std::string& unit, bool& added) {
  for (auto& c : rd.counters)
    if (c.name() == name) return c;
  added = true;
  rd.counters.emplace_back(name, unit);
  return rd.counters.back();
}

void sort_samples(CounterSeries& series) {
  // Samples from several threads may interleave: sort by time (stable keeps equal-time order).
  bool sorted_in = true;
  for (std::size_t i = 1; i < series.size() && sorted_in; ++i) sorted_in = series.time(i - 1) <= series.time(i);
  if (sorted_in) return;
  std::vector<std::pair<TimeNs, double>> tv;
  tv.reserve(series.size());
  for (std::size_t i = 0; i < series.size(); ++i) tv.emplace_back(series.time(i), series.value(i));
  std::stable_sort(tv.begin(), tv.end(), [](auto& a, auto& b) { return a.first < b.first; });
  series.clear();
  for (auto& [t, v] : tv) series.add(t, v);
}

// Appends `fresh` (sorted) to `dst`; late samples are merged after the published ones of equal time.
void merge_samples(CounterSeries& dst, CounterSeries& fresh) {
  if (dst.size() == 0) {  // move the arrays in; `fresh` keeps its address (the ingest caches it)
    CounterSeries emptied(fresh.name(), fresh.unit());
    std::string name = dst.name();  // dst may be published under another name ("sampled:allocated")
    dst = std::move(fresh);
    dst.rename(std::move(name));
    fresh = std::move(emptied);
    dst.update_levels(0);
    return;
  }
  const std::size_t n = dst.size();
  if (fresh.time(0) >= dst.time(n - 1)) {
    for (std::size_t i = 0; i < fresh.size(); ++i) dst.add(fresh.time(i), fresh.value(i));
    dst.update_levels(n);
  } else {
    std::vector<std::pair<TimeNs, double>> tv;
    tv.reserve(n + fresh.size());
    for (std::size_t i = 0; i < n; ++i) tv.emplace_back(dst.time(i), dst.value(i));
    for (std::size_t i = 0; i < fresh.size(); ++i) tv.emplace_back(fresh.time(i), fresh.value(i));
    std::stable_sort(tv.begin(), tv.end(), [](auto& a, auto& b) { return a.first < b.first; });
    dst.clear();
    for (auto& [t, v] : tv) dst.add(t, v);
    dst.update_levels(0);
  }
  fresh.clear();
}

}  // namespace memcomm::view
