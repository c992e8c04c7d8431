// TimelineBuilder::append_to() and finish(): the ingested arrays into the indexed model.
//
// Note [Incremental append]: live mode publishes new events every ~100 ms. Rebuilding the model
// from all events received costs O(run length) per publish, so event-to-pixels grew with the run;
// instead each structure takes in only what is new, in O(new events) when events arrive in time
// order (the common case), and falls back to redoing one track when they do not:
//   - stream lanes: spans at or after the lane's last start go first-fit onto the rows, exactly as
//     a full pack would place them; an earlier span re-packs that lane;
//   - phase/NVTX lanes (nested rows): a range is published when it ends, after the ranges nested in
//     it, so new spans often start before published ones. The spans that start at or after the
//     earliest new start are cut from the rows and re-nested with the new ones, from the stack of
//     enclosing spans rebuilt from the rows' last spans: O(one step's phases), not O(all phases);
//   - counters: samples appended, LOD levels updated from the first changed bucket (counter_lod);
//   - allocator events: appended; the derived curves and the expandable-segment marks continue
//     from the state kept in RankParts::derive; a late event or a mark on an already folded
//     segment refolds that rank's curves;
//   - collectives: appended; only the (comm, seq) groups they join are re-matched.
// finish() is append_to() into an empty Timeline, so both paths build the same model (the tests
// compare them field by field).
#include <memcomm/view/builder.hpp>

#include "append_parts.hpp"

#include <algorithm>
#include <cstdint>

namespace memcomm::view {

void sort_counters(RankData& rd) {
  std::sort(rd.counters.begin(), rd.counters.end(), [](const CounterSeries& a, const CounterSeries& b) { return a.name() < b.name(); });
}

void TimelineBuilder::append_rank(RankData& rd, std::uint32_t slot, RankParts& p, AppendResult& r,
                                  std::vector<std::pair<std::uint32_t, std::uint32_t>>& new_colls, bool& rematch) {
  if (!p.host.empty()) rd.host = p.host;
  rd.dropped += p.dropped;
  p.dropped = 0;
  rd.step_ids = rd.step_ids || p.step_ids;
  append_spans(rd, p);
  name_lanes(rd, p);
  if (!p.collectives.empty()) append_collectives(rd, p, new_colls, rematch);
  note_memory_sources(rd, p);
  append_counters(rd, p);
  append_alloc_events(rd, slot, p, r);
}

// Phase and NVTX ranges nest; stream spans pack first-fit (Note [Incremental append]).
void TimelineBuilder::append_spans(RankData& rd, RankParts& p) {
  const auto bound_spans = [this](const SpanRow& v) {
    v.for_each_chunk([this](const Span* s, std::size_t n) {
      for (std::size_t i = 0; i < n; ++i) bound(s[i].start, s[i].end);
    });
  };
  if (!p.phases.empty()) {
    bound_spans(p.phases);
    merge_nested(lane_for(rd, LaneKind::Phase, 0), p.phases);
    p.phases.clear();
  }
  for (auto& [thread, spans] : p.nvtx) {  // one nested lane per thread
    if (spans.empty()) continue;
    bound_spans(spans);
    merge_nested(lane_for(rd, LaneKind::Nvtx, thread), spans);
    spans.clear();
  }
  for (auto& [key, spans] : p.streams) {
    if (spans.empty()) continue;
    Lane& lane = lane_for(rd, static_cast<LaneKind>(std::get<0>(key)), std::get<1>(key));
    if (lane.kind == LaneKind::Kernel && !lane.comm_kernels)
      spans.for_each_chunk([&lane](const Span* s, std::size_t n) {
        for (std::size_t i = 0; i < n && !lane.comm_kernels; ++i) lane.comm_kernels = s[i].payload == kCommKernel;
      });
    const auto [lo, hi] = merge_packed(lane, spans);
    spans.clear();
    bound(lo, hi);
  }
}

// Lane names the trace gives (threads, streams: lane_name()), once their lanes exist.
void TimelineBuilder::name_lanes(RankData& rd, RankParts& p) {
  if (p.lane_names.empty() || (!p.names_changed && rd.lanes.size() == p.lanes_named)) return;
  p.names_changed = false;
  p.lanes_named = rd.lanes.size();
  for (Lane& lane : rd.lanes) {
    const bool nvtx = lane.kind == LaneKind::Nvtx;
    if (!nvtx && lane.kind != LaneKind::Kernel && lane.kind != LaneKind::Memcpy && lane.kind != LaneKind::Memset) continue;
    // A stream's name is given to its kernel lane; its memcpy and memset lanes add their kind.
    auto it = p.lane_names.find({static_cast<std::uint8_t>(nvtx ? LaneKind::Nvtx : LaneKind::Kernel), lane.stream});
    if (it == p.lane_names.end()) continue;
    lane.name = nvtx || lane.kind == LaneKind::Kernel ? it->second : it->second + " " + lane_kind_name(lane.kind);
  }
}

void TimelineBuilder::append_collectives(RankData& rd, RankParts& p,
                                         std::vector<std::pair<std::uint32_t, std::uint32_t>>& new_colls, bool& rematch) {
  auto& cs = p.collectives;
  const auto by_start = [](const Collective& a, const Collective& b) { return a.start < b.start; };
  if (!std::is_sorted(cs.begin(), cs.end(), by_start)) std::stable_sort(cs.begin(), cs.end(), by_start);
  for (const auto& c : cs) bound(c.start, c.end);
  Lane& lane = lane_for(rd, LaneKind::Collective, 0);
  auto& all = rd.collectives;
  if (all.empty() || cs.front().start >= all.back().start) {
    const auto base = static_cast<std::uint32_t>(all.size());
    SpanRow spans;
    spans.reserve(cs.size());
    for (std::uint32_t i = 0; i < cs.size(); ++i) {
      spans.push_back({cs[i].start, cs[i].end, cs[i].op, base + i});
      if (!rematch) new_colls.emplace_back(rd.rank, base + i);  // else all groups are matched anyway
    }
    if (all.empty()) {
      all = std::move(cs);
      cs = ChunkedArray<Collective>();
    } else {
      all.append(cs);
    }
    merge_packed(lane, spans);
  } else {  // a late collective: indices shift, so the lane and all matching are redone
    all.append(cs);
    std::stable_sort(all.begin(), all.end(), by_start);
    SpanRow spans;
    spans.reserve(all.size());
    for (std::uint32_t i = 0; i < all.size(); ++i) spans.push_back({all[i].start, all[i].end, all[i].op, i});
    lane.rows.clear();
    merge_packed(lane, spans);
    rematch = true;
  }
  cs.clear();
}

// Which of a rank's memory curves its samples carry, and whether its block events make curves.
void TimelineBuilder::note_memory_sources(RankData& rd, RankParts& p) {
  if (p.samples_dropped) drop_published_samples(rd, p);
  // Note [Memory curves from block events] (allocator_fold.hpp): derive_alloc() decides which of
  // allocated/active/reserved come from the block events; their samples are then kept as
  // "sampled:..." so that the names the views and the step table read are the curves in charge.
  if (!p.derive.blocks && std::any_of(p.alloc.begin(), p.alloc.end(), [](const AllocEvent& e) { return e.op != prof::EventKind::Oom; }))
    p.derive.blocks = true;
  for (int k = 0; k < kLevelCurves; ++k) p.sampled_level[k] = p.sampled_level[k] || p.counters.count(kDerivedMemory[k]) != 0;
  // A rank that samples its memory keeps its sampled largest_free/fragmentation (or none): derived
  // ones are made only when it samples nothing, and give way to samples that show up late (live).
  if (!p.sampled_memory && std::any_of(std::begin(kDerivedMemory), std::end(kDerivedMemory), [&](const char* n) { return p.counters.count(n) != 0; })) {
    p.sampled_memory = true;
    if (p.derive.free_derived) {
      rd.counters.erase(std::remove_if(rd.counters.begin(), rd.counters.end(),
                                       [](const CounterSeries& c) {
                                         return c.name() == kDerivedMemory[3] || c.name() == kDerivedMemory[4];
                                       }),
                        rd.counters.end());
      p.derive.free_derived = false;
      p.derive.provisional = false;
    }
  }
}

// The curves now follow another device (memory_sample_device): the old device's published samples
// go. Curves derived from block events stay until derive_alloc() refolds them for the new device.
void TimelineBuilder::drop_published_samples(RankData& rd, RankParts& p) {
  const auto derived = [&p](const std::string& name) {  // a curve the block events make
    for (int k = 0; k < kLevelCurves; ++k)
      if (name == kDerivedMemory[k]) return p.derive.from_events[k];
    return p.derive.free_derived && (name == kDerivedMemory[3] || name == kDerivedMemory[4]);
  };
  const auto holds_samples = [&](const CounterSeries& c) {
    for (int m = 0; m < static_cast<int>(prof::MemMetric::Count); ++m) {
      const std::string name = prof::mem_metric_name(static_cast<prof::MemMetric>(m));
      if (c.name() == kSampledPrefix + name || (c.name() == name && !derived(name))) return true;
    }
    return false;
  };
  rd.counters.erase(std::remove_if(rd.counters.begin(), rd.counters.end(), holds_samples), rd.counters.end());
  std::fill(std::begin(p.sampled_level), std::end(p.sampled_level), false);
  p.samples_dropped = false;
}

void TimelineBuilder::append_counters(RankData& rd, RankParts& p) {
  bool added = false;
  for (auto& [name, series] : p.counters) {
    if (series.size() == 0) continue;
    sort_samples(series);
    bound(series.time(0), series.time(series.size() - 1));
    bool superseded = false;
    for (int k = 0; k < kLevelCurves; ++k) superseded = superseded || (name == kDerivedMemory[k] && p.derive.from_events[k]);
    merge_samples(counter_for(rd, superseded ? kSampledPrefix + name : name, series.unit(), added), series);
  }
  if (added) sort_counters(rd);
}

void TimelineBuilder::append_alloc_events(RankData& rd, std::uint32_t slot, RankParts& p, AppendResult& r) {
  if (!p.alloc.empty()) {
    auto& fresh = p.alloc;
    const auto by_time = [](const AllocEvent& a, const AllocEvent& b) { return a.t < b.t; };
    if (!std::is_sorted(fresh.begin(), fresh.end(), by_time)) std::stable_sort(fresh.begin(), fresh.end(), by_time);
    bound(fresh.front().t, fresh.back().t);
    auto& ev = rd.alloc_events;
    std::size_t from = ev.size();
    if (ev.empty()) {
      ev = std::move(fresh);
      fresh = AllocEvents();
    } else if (fresh.front().t >= ev.back().t) {
      ev.append(fresh);
    } else {  // late events: merged after the published ones of equal time, all refolded
      from = 0;
      const auto mid = static_cast<std::ptrdiff_t>(ev.size());
      ev.append(fresh);
      std::inplace_merge(ev.begin(), ev.begin() + mid, ev.end(), by_time);
    }
    fresh.clear();
    p.allocations_stale = true;
    derive_alloc(rd, p, from, r, slot);
  } else if (p.derive.blocks && rd.dropped != 0 && p.sampled_memory) {
    derive_alloc(rd, p, rd.alloc_events.size(), r, slot);  // drops with no new events: back to the samples
  } else if (p.derive.blocks && p.sample_device >= 0 && p.sample_device != p.derive.device) {
    derive_alloc(rd, p, rd.alloc_events.size(), r, slot);  // the samples moved to another device: refold
  }
}

AppendResult TimelineBuilder::append_to(Timeline& tl) {
  AppendResult r;
  fresh_lo_ = INT64_MAX;
  for (std::size_t i = tl.strings.size(); i < strings_.size(); ++i) tl.strings.intern(strings_.get(static_cast<std::uint32_t>(i)));
  for (auto& [rank, parts] : ranks_) {
    (void)parts;
    auto it = std::lower_bound(tl.ranks.begin(), tl.ranks.end(), rank, [](const RankData& d, std::uint32_t v) { return d.rank < v; });
    if (it != tl.ranks.end() && it->rank == rank) continue;
    RankData rd;
    rd.rank = rank;
    tl.ranks.insert(it, std::move(rd));
    r.ranks_added = true;
  }
  r.alloc_from.assign(tl.ranks.size(), AppendResult::npos);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> new_colls;  // (rank id, index)
  bool rematch = r.ranks_added;
  std::uint32_t slot = 0;
  for (auto& [rank, parts] : ranks_) {
    while (tl.ranks[slot].rank != rank) ++slot;  // both sorted by rank
    append_rank(tl.ranks[slot], slot, parts, r, new_colls, rematch);
  }
  if (lo_ <= hi_) {
    tl.begin = lo_;
    tl.end = hi_;
  }
  r.first_time = fresh_lo_;
  r.events = events_;
  tl.event_count += events_;
  events_ = 0;
  // Collective matching: the groups the new collectives joined, or all of them. The group index
  // is built only when an append needs it (live), never for a one-shot load.
  if (rematch) {
    groups_valid_ = false;
    match_collectives(tl);
  } else if (!new_colls.empty()) {
    if (!groups_valid_) {  // index what was published before these
      groups_.clear();
      for (const auto& rd : tl.ranks)
        for (std::uint32_t i = 0; i < rd.collectives.size(); ++i)
          groups_[collective_key(rd.collectives[i])].emplace_back(rd.rank, i);
      groups_valid_ = true;
    } else {
      for (const auto& [rank, index] : new_colls) {
        const auto& rd = *std::lower_bound(tl.ranks.begin(), tl.ranks.end(), rank,
                                           [](const RankData& d, std::uint32_t v) { return d.rank < v; });
        groups_[collective_key(rd.collectives[index])].emplace_back(rank, index);
      }
    }
    std::vector<CollectiveKey> touched;
    for (const auto& [rank, index] : new_colls) {
      const auto& rd = *std::lower_bound(tl.ranks.begin(), tl.ranks.end(), rank,
                                         [](const RankData& d, std::uint32_t v) { return d.rank < v; });
      touched.push_back(collective_key(rd.collectives[index]));
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    std::vector<CollectiveRef> refs;
    CollOpCache cache;
    for (const auto& key : touched) {
      refs.clear();
      for (const auto& [rank, index] : groups_[key]) {
        const auto at = std::lower_bound(tl.ranks.begin(), tl.ranks.end(), rank,
                                         [](const RankData& d, std::uint32_t v) { return d.rank < v; });
        refs.push_back({static_cast<std::uint32_t>(at - tl.ranks.begin()), index});
      }
      std::sort(refs.begin(), refs.end(), [](const CollectiveRef& a, const CollectiveRef& b) {
        return a.slot != b.slot ? a.slot < b.slot : a.index < b.index;
      });
      match_collective_group(tl, refs, cache);
    }
  }
  return r;
}

Timeline TimelineBuilder::finish(std::string source) {
  Timeline tl;
  tl.strings = std::move(strings_);  // append_to() copies only the strings tl lacks: none
  strings_ = StringTable();
  append_to(tl);
  tl.sources.push_back(std::move(source));
  for (auto& rd : tl.ranks) {
    // Chunked arrays shrink by freeing unused chunks and trimming the last one: a copy of at most
    // one chunk each (Note [Chunked arrays]), so the slack of the estimated reservations goes.
    for (auto& lane : rd.lanes) {
      for (auto& row : lane.rows) row.shrink_to_fit();
      lane.rows.shrink_to_fit();
    }
    rd.collectives.shrink_to_fit();
    rd.alloc_events.shrink_to_fit();
    for (auto& c : rd.counters) c.shrink_to_fit();
    if (!producer_allocations_) build_allocations(rd);
  }
  *this = TimelineBuilder();
  return tl;
}

void TimelineBuilder::build_allocations(RankData& rd) {
  RankParts& p = rank(rd.rank);
  p.allocations_stale = false;
  rd.allocations = allocations_from_events(rd.alloc_events);
  prof::leave_out_host_beside_gpu(rd.allocations);  // Note [Host memory beside a GPU's]
  // Note [Bytes a memory profile never saw allocated] (trace/src/allocations.cpp), as
  // memcomm-trace memory counts them: a rank whose block events start mid-run (a torch.profiler
  // trace, a time-range load) holds what its allocated readings count beyond its blocks.
  const CounterSeries* allocated = rd.counter("allocated");
  if (p.blocks_cut && p.sample_device >= 0 && allocated != nullptr) {
    std::vector<prof::LevelAt> levels;
    levels.reserve(allocated->size());
    for (std::size_t i = 0; i < allocated->size(); ++i)
      levels.push_back({allocated->time(i), static_cast<std::uint8_t>(p.sample_device),
                        static_cast<std::uint64_t>(std::max(0.0, allocated->value(i)))});
    prof::add_untraced_live(rd.allocations, levels);
  }
  rd.alloc_index = AllocationIndex(rd.allocations);
}

bool TimelineBuilder::refresh_allocations(Timeline& tl) {
  bool any = false;
  for (RankData& rd : tl.ranks) {
    if (!rank(rd.rank).allocations_stale) continue;
    build_allocations(rd);
    any = true;
  }
  return any;
}

}  // namespace memcomm::view
