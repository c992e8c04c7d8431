#include <memcomm/view/app/app_state.hpp>

#include <memcomm/view/indexes.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace memcomm::view {

void AppState::message(const std::string& m) {
  std::fprintf(stderr, "memcomm-view: %s\n", m.c_str());
  messages.push_back(m);
}

void AppState::set_timeline(Timeline&& t, bool merge) {
  const bool was_empty = tl.empty();
  ++data_generation;
  if (merge) tl.merge(std::move(t));
  else tl = std::move(t);
  // Ranks may have moved inside tl.ranks: rebuild what points into them.
  alloc.clear();
  // Allocator checkpoints, step table and summary as jobs on two threads (Note [Parallel indexes]).
  TimelineIndexes ix = build_indexes(tl);
  alloc = std::move(ix.alloc);
  steps = std::move(ix.steps);
  summary = ix.summary;
  name_phase = phase_kinds(tl);
  sum_steps();
  collapsed.assign(tl.ranks.size(), false);
  memory_rank = std::clamp(memory_rank, 0, std::max(0, static_cast<int>(tl.ranks.size()) - 1));
  if (was_empty || !merge) {
    zoom_to(tl.begin, tl.end);
    alloc_time = tl.end;
  }
  search_applied.clear();
  apply_search();
  has_selection = false;
  pinned_alloc = -1;  // indices into the old allocations
  has_hovered_alloc = false;
  compare_rank = -1;  // a slot of the old ranks
}

bool AppState::follow_pinned_rank() {
  if (pinned_alloc < 0) return false;
  const auto slot = std::find_if(tl.ranks.begin(), tl.ranks.end(), [this](const RankData& r) { return r.rank == pinned_rank_id; });
  if (slot == tl.ranks.end()) pinned_alloc = -1;
  else pinned_rank = static_cast<int>(slot - tl.ranks.begin());
  return pinned_alloc >= 0;
}

void AppState::allocations_rebuilt() {
  ++data_generation;
  if (!follow_pinned_rank()) return;
  // A rebuild may move it: a block from before the stream sorts first (O(allocations), as the rebuild).
  const auto& list = tl.ranks[static_cast<std::size_t>(pinned_rank)].allocations.list;
  const auto it = std::find_if(list.begin(), list.end(), [this](const prof::Allocation& a) {
    return bounded_time(a.alloc_ns) == pinned_t0 && a.addr == pinned_addr;
  });
  if (it == list.end()) {
    pinned_alloc = -1;
    return;
  }
  pinned_alloc = static_cast<int>(it - list.begin());
  pinned_t1 = it->free_ns == prof::kStillLive ? tl.end : bounded_time(it->free_ns);
}

void AppState::refresh_peak() {
  if (peak_rank == memory_rank && peak_generation == data_generation) return;
  peak_rank = memory_rank;
  peak_generation = data_generation;
  alloc_peak = {};
  holders_peak = {};
  if (tl.ranks.empty()) return;
  const RankData& rd = tl.ranks[static_cast<std::size_t>(memory_rank)];
  alloc_peak = prof::peak_live(rd.allocations);
  holders_peak = holders_at(rd, alloc_peak.t);
}

void AppState::appended(const AppendResult& r, bool refresh_summary) {
  if (r.ranks_added || alloc.size() != tl.ranks.size()) {  // slots moved: per-slot state from scratch
    alloc.clear();
    for (const auto& rd : tl.ranks) alloc.push_back(std::make_unique<AllocatorTimeline>(&rd.alloc_events));
    collapsed.resize(tl.ranks.size(), false);
    memory_rank = std::clamp(memory_rank, 0, std::max(0, static_cast<int>(tl.ranks.size()) - 1));
    follow_pinned_rank();
  } else {
    for (std::size_t s = 0; s < r.alloc_from.size() && s < alloc.size(); ++s)
      if (r.alloc_from[s] != AppendResult::npos) alloc[s]->update(r.alloc_from[s]);
  }
  for (auto i = static_cast<std::uint32_t>(name_phase.size()); i < tl.strings.size(); ++i)
    name_phase.push_back(prof::phase_from_name(tl.strings.get(i)));
  // Only steps that end at or after the new data are recomputed; the summary walks collectives,
  // so live mode refreshes it at most once a second (refresh_summary).
  steps = r.ranks_added ? step_table(tl) : step_table(tl, steps, r.first_time);
  sum_steps();
  if (refresh_summary) summary = summarize(tl);
  if (!search_applied.empty()) {  // recounted only while a search is active
    search_applied.clear();
    apply_search();
  }
  if (has_selection) selection = range_stats(tl, sel_t0, sel_t1);  // O(spans in the selection)
}

void AppState::sum_steps() {
  steps_time = steps_exposed = steps_wait = 0;
  for (const auto& r : steps) {
    steps_time += r.end - r.start;
    steps_exposed += r.exposed_comm;
    steps_wait += r.data_wait;
  }
}

void AppState::zoom_to(TimeNs t0, TimeNs t1) {
  if (t1 < t0) std::swap(t0, t1);
  const TimeNs min_width = 1000;  // 1 us across the screen is as far as zoom goes
  if (t1 - t0 < min_width) {
    const TimeNs mid = t0 + (t1 - t0) / 2;
    t0 = mid - min_width / 2;
    t1 = t0 + min_width;
  }
  // Never zoom out past 4x the data (keeps the arithmetic far from overflow).
  const TimeNs span = std::max<TimeNs>(tl.end - tl.begin, min_width);
  if (t1 - t0 > 4 * span) {
    const TimeNs mid = tl.begin + span / 2;
    t0 = mid - 2 * span;
    t1 = mid + 2 * span;
  }
  view_t0 = t0;
  view_t1 = t1;
}

void AppState::zoom_at(TimeNs at, double factor) {
  const double w = static_cast<double>(view_t1 - view_t0);
  const double f = (at - view_t0) / std::max(w, 1.0);
  const double nw = w * factor;
  const auto t0 = at - static_cast<TimeNs>(std::llround(nw * f));
  zoom_to(t0, t0 + static_cast<TimeNs>(std::llround(nw)));
}

void AppState::pan(TimeNs dt) { zoom_to(view_t0 + dt, view_t1 + dt); }

void AppState::apply_search() {
  if (search_applied == search) return;
  search_applied = search;
  search_match.assign(tl.strings.size(), false);
  search_hits = 0;
  if (search_applied.empty()) return;
  bool any = false;
  for (std::uint32_t i = 0; i < tl.strings.size(); ++i)
    if (tl.strings.get(i).find(search_applied) != std::string::npos) search_match[i] = any = true;
  if (!any) return;
  // Counted once per change of the search text, never per frame.
  for (const auto& rd : tl.ranks)
    for (const auto& lane : rd.lanes)
      for (const auto& row : lane.rows)
        for (const auto& s : row) search_hits += search_match[s.name];
}

void AppState::note_tooltip(const std::string& text) {
  tooltip = text;
  if (tooltips_seen.size() < 256 && (tooltips_seen.empty() || tooltips_seen.back() != text)) tooltips_seen.push_back(text);
}

std::string format_time(TimeNs ns) {
  char buf[64];
  const double a = std::fabs(static_cast<double>(ns));
  if (a < 1e3) std::snprintf(buf, sizeof buf, "%lld ns", static_cast<long long>(ns));
  else if (a < 1e6) std::snprintf(buf, sizeof buf, "%.3f us", ns / 1e3);
  else if (a < 1e9) std::snprintf(buf, sizeof buf, "%.3f ms", ns / 1e6);
  else std::snprintf(buf, sizeof buf, "%.3f s", ns / 1e9);
  return buf;
}

}  // namespace memcomm::view
