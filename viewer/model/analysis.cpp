// The step table, summary and range statistics the viewer shows. The figures are the profiler's
// (Note [One analysis engine] in memcomm/trace/analysis.hpp): a step's comm, exposed comm and
// overlap are prof::comm_overlap() of the communication and compute inside it, collectives are
// timed by prof::collective_timing() when matched (builder.cpp), the mean busbw is prof::BusbwMean.
// What is the viewer's own is finding those spans fast on its sorted rows: each row is walked
// forward with a cursor as the steps go by, and compute is looked up only inside communication
// intervals (only there can it overlap), so a step costs O(collectives x log spans), not O(kernels).
#include <memcomm/view/analysis.hpp>

#include <memcomm/trace/analysis.hpp>

#include <algorithm>

namespace memcomm::view {

namespace {

using Intervals = std::vector<prof::Interval>;  // the profiler's interval arithmetic (memcomm/trace/intervals.hpp)

// Appends the parts inside [t0, t1) of the spans of `row` that `keep` accepts, clipped.
constexpr auto kEverySpan = [](const Span&) { return true; };
template <class Keep = decltype(kEverySpan)>
void clip_row(const SpanRow& row, TimeNs t0, TimeNs t1, Intervals& out, Keep keep = kEverySpan) {
  for (std::size_t i = lower_bound_index(row, t0, [](const Span& s, TimeNs t) { return s.end <= t; });
       i < row.size() && row[i].start < t1; ++i)
    if (keep(row[i])) out.push_back({std::max(row[i].start, t0), std::min(row[i].end, t1)});
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
  // Appends the parts of the row inside [t0, t1), clipped: of every span, or only of the kernels
  // that are (Comm) or are not (Compute) communication kernels.
  enum class Pick { All, Comm, Compute };
  void clip(TimeNs t0, TimeNs t1, Intervals& out, Pick pick = Pick::All) {
    const auto& r = *row_;
    for (std::size_t i = seek(t0); i < r.size() && r[i].start < t1; ++i)
      if (pick == Pick::All || (r[i].payload == kCommKernel) == (pick == Pick::Comm))
        out.push_back({std::max(r[i].start, t0), std::min(r[i].end, t1)});
  }

 private:
  const SpanRow* row_;
  std::size_t pos_ = 0;
  TimeNs last_t_ = INT64_MIN;
};

}  // namespace

std::vector<prof::Phase> phase_kinds(const Timeline& tl) {
  std::vector<prof::Phase> kind_of(tl.strings.size());
  for (std::uint32_t i = 0; i < tl.strings.size(); ++i) kind_of[i] = prof::phase_from_name(tl.strings.get(i));
  return kind_of;
}

std::vector<StepRow> step_table(const Timeline& tl, const std::vector<StepRow>& previous, TimeNs changed_from) {
  std::vector<StepRow> rows;
  const std::vector<prof::Phase> kind_of = phase_kinds(tl);  // parsed once, not once per phase span
  for (std::size_t slot = 0; slot < tl.ranks.size(); ++slot) step_rows(tl, slot, kind_of, rows, previous, changed_from);
  return rows;
}

namespace {

bool marks_compute_phases(const std::vector<const SpanRow*>& phase_rows, const std::vector<prof::Phase>& kind_of) {
  for (const SpanRow* row : phase_rows)
    for (const Span& s : *row)
      if (s.name < kind_of.size() && prof::is_compute_phase(kind_of[s.name])) return true;
  return false;
}

// One rank's rows and cursors, sorted out once; step() computes one step's row from them.
class StepScanner {
 public:
  StepScanner(const RankData& rd, const std::vector<prof::Phase>& kind_of) : rd_(rd), kind_of_(kind_of) {
    bool on_device = false;  // a GPU run (Note [Breakdown definitions])
    for (const auto& lane : rd.lanes) {
      on_device = on_device || lane.kind == LaneKind::Kernel || lane.kind == LaneKind::Memcpy || lane.kind == LaneKind::Memset;
      comm_kernels_ = comm_kernels_ || lane.comm_kernels;
    }
    // Communication is the communication kernels where the rank has them, else the collectives;
    // compute is the other kernels (Note [Breakdown definitions]).
    for (const auto& lane : rd.lanes)
      for (const auto& row : lane.rows) {
        if (lane.kind == LaneKind::Collective && !comm_kernels_) {
          comm_.emplace_back(&row);
        } else if (lane.kind == LaneKind::Kernel) {
          compute_.emplace_back(&row);
          if (lane.comm_kernels) comm_.emplace_back(&row);
        } else if (lane.kind == LaneKind::Phase) {
          phases_.emplace_back(&row);
          // On CPU runs the host phases are the compute (Note [Breakdown definitions]).
          if (!on_device) compute_phases_.push_back(&row);
        }
      }
    // A CPU run that marks no compute phase (a torch.profiler trace of a CPU script): its
    // operators are the compute, less each thread's blocking communication calls.
    if (!on_device && !marks_compute_phases(compute_phases_, kind_of)) {
      for (const auto& lane : rd.lanes)
        if (lane.kind == LaneKind::Nvtx && prof::runs_operators(static_cast<std::uint16_t>(lane.stream)))
          operator_lanes_.push_back(&lane);
      comm_calls_ = compute_phases_;
      compute_phases_.clear();
    }
    allocated_ = rd.counter("allocated");
  }

  StepRow step(const Span& st, std::uint64_t id) {
    StepRow r;
    r.rank = rd_.rank;
    r.step = id;
    r.start = st.start;
    r.end = st.end;
    comm_iv_.clear();
    wait_.clear();
    for (auto& cur : comm_) cur.clip(st.start, st.end, comm_iv_, comm_kernels_ ? RowCursor::Pick::Comm : RowCursor::Pick::All);
    for (auto& cur : phases_) {
      const auto& row = cur.row();
      for (std::size_t i = cur.seek(st.start); i < row.size() && row[i].start < st.end; ++i)
        if (kind(row[i].name) == prof::Phase::DataWait)
          wait_.push_back({std::max(row[i].start, st.start), std::min(row[i].end, st.end)});
    }
    prof::merge_intervals(comm_iv_);
    prof::merge_intervals(wait_);
    r.data_wait = prof::merged_length(wait_);
    const prof::CommOverlap co = prof::comm_overlap(comm_iv_, compute_inside_comm());
    r.comm = co.comm_total_ns;
    r.exposed_comm = co.exposed_comm_ns;
    r.overlap_pct = co.overlap_pct;
    // Exact from the block events when their fold is complete (Note [Memory curves from block
    // events]); the window is prof::analyze's (Note [One analysis engine]).
    double mn = 0, mx = 0;
    r.memory_recorded = allocated_ != nullptr && allocated_->size() > 0;
    if (allocated_ && allocated_->range_min_max(st.start, st.end, mn, mx, mem_cursor_)) r.peak_allocated = mx;
    return r;
  }

 private:
  prof::Phase kind(std::uint32_t id) const { return id < kind_of_.size() ? kind_of_[id] : prof::Phase::Custom; }
  // The compute inside each (disjoint, sorted) communication interval, merged: all of the compute
  // that can meet communication, so comm_overlap() gives what it gives over the step's compute.
  const std::vector<prof::Interval>& compute_inside_comm() {
    compute_prof_.clear();
    for (const auto& iv : comm_iv_) {
      covered_.clear();
      for (auto& cur : compute_) cur.clip(iv.begin, iv.end, covered_, RowCursor::Pick::Compute);
      blocked_.clear();
      for (const SpanRow* row : compute_phases_) {
        clip_row(*row, iv.begin, iv.end, covered_, [&](const Span& s) { return prof::is_compute_phase(kind(s.name)); });
        clip_row(*row, iv.begin, iv.end, blocked_, [&](const Span& s) { return kind(s.name) == prof::Phase::Comm; });
      }
      prof::merge_intervals(covered_);
      prof::merge_intervals(blocked_);  // the phases less their comm phases, as prof::analyze takes them
      for (const prof::Interval& c : prof::subtract(covered_, blocked_)) compute_prof_.push_back(c);
      for (const Lane* lane : operator_lanes_) add_operators_outside_comm(*lane, iv.begin, iv.end);
    }
    prof::merge_intervals(compute_prof_);
    return compute_prof_;
  }

  // prof::operators_outside_comm's figure for one thread inside [t0, t1): its operators less the
  // communication calls on its lane and the comm phases it blocked in (a comm phase's payload is its
  // thread), appended to compute_prof_.
  void add_operators_outside_comm(const Lane& lane, TimeNs t0, TimeNs t1) {
    operators_.clear();
    blocked_.clear();
    for (const SpanRow& row : lane.rows) {
      clip_row(row, t0, t1, operators_, [](const Span& s) { return s.payload == 0; });
      clip_row(row, t0, t1, blocked_, [](const Span& s) { return s.payload == kCommCall; });
    }
    for (const SpanRow* row : comm_calls_)
      clip_row(*row, t0, t1, blocked_, [&](const Span& s) { return kind(s.name) == prof::Phase::Comm && s.payload == lane.stream; });
    prof::merge_intervals(operators_);
    prof::merge_intervals(blocked_);
    for (const prof::Interval& i : prof::subtract(operators_, blocked_)) compute_prof_.push_back(i);
  }

  const RankData& rd_;
  const std::vector<prof::Phase>& kind_of_;
  std::vector<RowCursor> comm_, compute_, phases_;
  std::vector<const SpanRow*> compute_phases_;
  std::vector<const Lane*> operator_lanes_;   // CPU runs without compute phases: the operators' threads
  std::vector<const SpanRow*> comm_calls_;    // and the phase rows that hold their comm phases
  bool comm_kernels_ = false;  // some kernel is a communication kernel (kCommKernel)
  const CounterSeries* allocated_ = nullptr;
  std::size_t mem_cursor_ = 0;
  Intervals comm_iv_, wait_, covered_, operators_, blocked_, compute_prof_;  // reused across steps: no allocation per step
};

}  // namespace

void step_rows(const Timeline& tl, std::size_t slot, const std::vector<prof::Phase>& kind_of, std::vector<StepRow>& rows,
               const std::vector<StepRow>& previous, TimeNs changed_from) {
  const RankData& rd = tl.ranks[slot];
  const Lane* phases = nullptr;
  for (const auto& lane : rd.lanes)
    if (lane.kind == LaneKind::Phase) phases = &lane;
  if (phases == nullptr) return;
  std::uint64_t ordinal = 0;
  for (const auto& row : previous)
    if (row.rank == rd.rank && row.end < changed_from) {
      rows.push_back(row);
      ++ordinal;
    }
  std::vector<Span> steps;
  for (const auto& row : phases->rows) {  // rows are sorted by end too: skip the kept steps
    auto it = std::lower_bound(row.begin(), row.end(), changed_from, [](const Span& s, TimeNs t) { return s.end < t; });
    for (; it != row.end(); ++it)
      if (it->name < kind_of.size() && kind_of[it->name] == prof::Phase::Step) steps.push_back(*it);
  }
  const auto by_start = [](const Span& a, const Span& b) { return a.start < b.start; };
  if (!std::is_sorted(steps.begin(), steps.end(), by_start)) std::sort(steps.begin(), steps.end(), by_start);
  StepScanner scan(rd, kind_of);
  // Steps are numbered by their Step range's recorded id (the span's payload), as memcomm-trace
  // report numbers them, 0 included (a torch.profiler trace's lone ProfilerStep#0). A rank whose
  // source numbers no steps (synthetic and hand-built runs: RankData::step_ids false, every payload
  // 0) has its steps numbered from 1 in start order, as the trainer numbers them.
  const bool recorded = rd.step_ids || std::any_of(steps.begin(), steps.end(), [](const Span& s) { return s.payload != 0; });
  for (const auto& st : steps) {
    ++ordinal;
    rows.push_back(scan.step(st, recorded ? st.payload : ordinal));
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
      rs.busy[static_cast<int>(lane.kind)] += prof::union_length(std::move(iv));
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
  prof::BusbwMean busbw;  // Note [Collective bandwidth]: bytes-weighted, each matched group once
  for (const auto& rd : tl.ranks) {
    for (const auto& lane : rd.lanes) s.spans += lane.span_count();
    s.alloc_events += rd.alloc_events.size();
    s.dropped += rd.dropped;
    s.ooms += rd.ooms.size();
    for (const auto& c : rd.counters) s.samples += c.size();
    if (const auto* a = rd.counter("allocated"); a && a->size() > 0) {
      s.memory_recorded = true;
      s.peak_allocated = std::max(s.peak_allocated, a->global_max());
    }
    if (const auto* r = rd.counter("reserved")) s.peak_reserved = std::max(s.peak_reserved, r->global_max());
    for (const auto& c : rd.collectives) {
      s.collectives += c.first_in_group;
      s.disagreeing += c.first_in_group && c.ranks_disagree;
      if (c.ranks_disagree) continue;  // Note [Collectives the ranks disagree on] (the profiler's analysis.cpp)
      if (c.first_in_group) busbw.add(c.busbw, c.bytes, c.time);
      s.max_skew = std::max(s.max_skew, c.skew);
      if (c.straggler) ++s.stragglers[rd.rank];
    }
  }
  s.mean_busbw = busbw.value();
  s.busbw_known = busbw.known();
  return s;
}

}  // namespace memcomm::view
