#include <memcomm/view/analysis.hpp>

#include <algorithm>

namespace memcomm::view {

namespace {

using Intervals = std::vector<std::pair<TimeNs, TimeNs>>;

// Appends the parts of `row` inside [t0, t1), clipped.
void clip_row(const SpanRow& row, TimeNs t0, TimeNs t1, Intervals& out) {
  for (std::size_t i = lower_bound_index(row, t0, [](const Span& s, TimeNs t) { return s.end <= t; });
       i < row.size() && row[i].start < t1; ++i)
    out.emplace_back(std::max(row[i].start, t0), std::min(row[i].end, t1));
}

// Sorts and merges into disjoint intervals, in place (the step table calls this a few times per
// step: no allocation).
void unite_in_place(Intervals& v) {
  if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
  std::size_t n = 0;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (n > 0 && iv.first <= v[n - 1].second) v[n - 1].second = std::max(v[n - 1].second, iv.second);
    else v[n++] = iv;
  }
  v.resize(n);
}
Intervals unite(Intervals v) {
  unite_in_place(v);
  return v;
}

// A row read in time order: steps and the communication inside them come sorted, so each row is
// walked forward from where the last lookup ended (galloping), not searched from the start: the
// step table costs O(spans near communication), not O(steps x collectives x log spans) with a
// cache miss per probe. A lookup that goes back in time searches from the start.
class RowCursor {
 public:
  explicit RowCursor(const SpanRow* row) : row_(row) {}
  const SpanRow& row() const { return *row_; }
  // Index of the first span ending after t.
  std::size_t seek(TimeNs t) {
    const auto& r = *row_;
    const auto ends_by = [](const Span& s, TimeNs v) { return s.end <= v; };
    if (t < last_t_) {
      pos_ = lower_bound_index(r, t, ends_by);
    } else {
      std::size_t step = 1, hi = pos_;
      while (hi < r.size() && r[hi].end <= t) {
        pos_ = hi + 1;
        hi += step;
        step *= 2;
      }
      hi = std::min(hi, r.size());
      pos_ = lower_bound_index(r, pos_, hi, t, ends_by);
    }
    last_t_ = t;
    return pos_;
  }
  // Appends the parts of the row inside [t0, t1), clipped.
  void clip(TimeNs t0, TimeNs t1, Intervals& out) {
    const auto& r = *row_;
    for (std::size_t i = seek(t0); i < r.size() && r[i].start < t1; ++i)
      out.emplace_back(std::max(r[i].start, t0), std::min(r[i].end, t1));
  }

 private:
  const SpanRow* row_;
  std::size_t pos_ = 0;
  TimeNs last_t_ = INT64_MIN;
};

TimeNs length(const Intervals& v) {
  TimeNs n = 0;
  for (const auto& iv : v) n += iv.second - iv.first;
  return n;
}

}  // namespace

std::vector<PhaseKind> phase_kinds(const Timeline& tl) {
  std::vector<PhaseKind> kind_of(tl.strings.size());
  for (std::uint32_t i = 0; i < tl.strings.size(); ++i) kind_of[i] = phase_kind_from_name(tl.strings.get(i));
  return kind_of;
}

std::vector<StepRow> step_table(const Timeline& tl, const std::vector<StepRow>& previous, TimeNs changed_from) {
  std::vector<StepRow> rows;
  const std::vector<PhaseKind> kind_of = phase_kinds(tl);  // parsed once, not once per phase span
  for (std::size_t slot = 0; slot < tl.ranks.size(); ++slot) step_rows(tl, slot, kind_of, rows, previous, changed_from);
  return rows;
}

void step_rows(const Timeline& tl, std::size_t slot, const std::vector<PhaseKind>& kind_of, std::vector<StepRow>& rows,
               const std::vector<StepRow>& previous, TimeNs changed_from) {
  const auto phase_kind = [&kind_of](std::uint32_t id) { return id < kind_of.size() ? kind_of[id] : PhaseKind::Other; };
  const RankData& rd = tl.ranks[slot];
  {
    const Lane* phases = nullptr;
    bool has_kernels = false;
    for (const auto& lane : rd.lanes) {
      if (lane.kind == LaneKind::Phase) phases = &lane;
      if (lane.kind == LaneKind::Kernel) has_kernels = true;
    }
    if (phases == nullptr) return;
    std::uint32_t index = 0;
    for (const auto& row : previous)
      if (row.rank == rd.rank && row.end < changed_from) {
        rows.push_back(row);
        ++index;
      }
    std::vector<Span> steps;
    for (const auto& row : phases->rows) {  // rows are sorted by end too: skip the kept steps
      auto it = std::lower_bound(row.begin(), row.end(), changed_from, [](const Span& s, TimeNs t) { return s.end < t; });
      for (; it != row.end(); ++it)
        if (phase_kind(it->name) == PhaseKind::Step) steps.push_back(*it);
    }
    const auto by_start = [](const Span& a, const Span& b) { return a.start < b.start; };
    if (!std::is_sorted(steps.begin(), steps.end(), by_start)) std::sort(steps.begin(), steps.end(), by_start);
    // Exact from the block events when their fold is complete (Note [Memory curves from block
    // events]): then a sample per alloc/free, so each step's range is found by galloping on from the last one.
    const CounterSeries* allocated = rd.counter("allocated");
    std::size_t mem_cursor = 0;
    // The rows each step looks into, sorted out once per rank.
    std::vector<const SpanRow*> comm_rows, compute_rows, phase_all;
    std::vector<std::pair<const SpanRow*, bool>> phase_rows;
    for (const auto& lane : rd.lanes) {
      for (const auto& row : lane.rows) {
        if (lane.kind == LaneKind::Collective) comm_rows.push_back(&row);
        else if (lane.kind == LaneKind::Kernel) compute_rows.push_back(&row);
        else if (lane.kind == LaneKind::Phase) {
          phase_all.push_back(&row);
          // On CPU runs the host phases are the compute (issue 4: "kernels" are host phases there).
          if (!has_kernels) phase_rows.emplace_back(&row, true);
        }
      }
    }
    std::vector<RowCursor> comm_cur, compute_cur, phase_cur;
    for (const auto* row : comm_rows) comm_cur.emplace_back(row);
    for (const auto* row : compute_rows) compute_cur.emplace_back(row);
    for (const auto* row : phase_all) phase_cur.emplace_back(row);
    Intervals comm, wait, covered, tmp;
    for (const auto& st : steps) {
      StepRow r;
      r.rank = rd.rank;
      r.index = index++;
      r.start = st.start;
      r.end = st.end;
      // Only compute that overlaps communication matters: look it up inside each communication
      // interval (binary searches), so a step costs O(collectives x log spans), not O(kernels).
      comm.clear();
      wait.clear();
      covered.clear();
      for (auto& cur : comm_cur) cur.clip(st.start, st.end, comm);
      for (auto& cur : phase_cur) {
        const auto& row = cur.row();
        for (std::size_t i = cur.seek(st.start); i < row.size() && row[i].start < st.end; ++i)
          if (phase_kind(row[i].name) == PhaseKind::DataWait)
            wait.emplace_back(std::max(row[i].start, st.start), std::min(row[i].end, st.end));
      }
      unite_in_place(comm);
      const Intervals& c = comm;
      // The comm intervals are disjoint, so the covered time is summed per interval: each union
      // sorts only the few parts inside one interval, not all of the step's.
      TimeNs covered_len = 0;
      for (const auto& iv : c) {
        covered.clear();
        for (auto& cur : compute_cur) cur.clip(iv.first, iv.second, covered);
        for (const auto& pr : phase_rows) {
          tmp.clear();
          clip_row(*pr.first, iv.first, iv.second, tmp);
          auto it = std::lower_bound(pr.first->begin(), pr.first->end(), iv.first, [](const Span& s, TimeNs t) { return s.end <= t; });
          for (const auto& part : tmp) {
            const PhaseKind k = phase_kind(it->name);
            ++it;
            if (k == PhaseKind::Forward || k == PhaseKind::Backward || k == PhaseKind::Optimizer) covered.push_back(part);
          }
        }
        unite_in_place(covered);
        covered_len += length(covered);
      }
      r.comm = length(c);
      r.exposed_comm = r.comm - covered_len;
      r.overlap_pct = r.comm > 0 ? 100.0 * static_cast<double>(r.comm - r.exposed_comm) / static_cast<double>(r.comm) : 0;
      unite_in_place(wait);
      r.data_wait = length(wait);
      double mn = 0, mx = 0;
      if (allocated && allocated->range_min_max(st.start, st.end, mn, mx, mem_cursor)) r.peak_allocated = mx;
      rows.push_back(r);
    }
  }
}

RangeStats range_stats(const Timeline& tl, TimeNs t0, TimeNs t1) {
  RangeStats rs;
  rs.t0 = std::min(t0, t1);
  rs.t1 = std::max(t0, t1);
  for (const auto& rd : tl.ranks) {
    for (const auto& lane : rd.lanes) {
      Intervals iv;
      for (const auto& row : lane.rows) clip_row(row, rs.t0, rs.t1, iv);
      rs.spans += iv.size();
      if (lane.kind == LaneKind::Collective) {
        for (const auto& row : lane.rows) {
          auto it = std::lower_bound(row.begin(), row.end(), rs.t0, [](const Span& s, TimeNs t) { return s.end <= t; });
          for (; it != row.end() && it->start < rs.t1; ++it) {
            ++rs.collectives;
            rs.collective_bytes += rd.collectives[it->payload].bytes;
          }
        }
      }
      rs.busy[static_cast<int>(lane.kind)] += length(unite(std::move(iv)));
    }
    if (const CounterSeries* a = rd.counter("allocated")) {
      double mn = 0, mx = 0;
      if (a->range_min_max(rs.t0, rs.t1, mn, mx)) {
        rs.mem_min = rs.mem_valid ? std::min(rs.mem_min, mn) : mn;
        rs.mem_max = rs.mem_valid ? std::max(rs.mem_max, mx) : mx;
        rs.mem_valid = true;
      }
    }
  }
  return rs;
}

Summary summarize(const Timeline& tl) {
  Summary s;
  s.duration = tl.end - tl.begin;
  double bw_sum = 0;
  std::uint64_t bw_n = 0;
  for (const auto& rd : tl.ranks) {
    for (const auto& lane : rd.lanes) s.spans += lane.span_count();
    s.collectives += rd.collectives.size();
    s.alloc_events += rd.alloc_events.size();
    s.dropped += rd.dropped;
    s.ooms += rd.ooms.size();
    for (const auto& c : rd.counters) s.samples += c.size();
    if (const auto* a = rd.counter("allocated")) s.peak_allocated = std::max(s.peak_allocated, a->global_max());
    if (const auto* r = rd.counter("reserved")) s.peak_reserved = std::max(s.peak_reserved, r->global_max());
    for (const auto& c : rd.collectives) {
      bw_sum += c.busbw;
      ++bw_n;
      s.max_skew = std::max(s.max_skew, c.skew);
      if (c.straggler && rd.rank < 64) ++s.stragglers[rd.rank];
    }
  }
  s.mean_busbw = bw_n ? bw_sum / static_cast<double>(bw_n) : 0;
  return s;
}

}  // namespace memcomm::view
