#include <memcomm/view/builder.hpp>

#include <algorithm>
#include <cstdint>
#include <unordered_map>

namespace memcomm::view {

void TimelineBuilder::phase(std::uint32_t r, std::string_view name, TimeNs start, TimeNs end) {
  rank(r).phases.push_back({start, std::max(start, end), strings_.intern(name), 0});
  ++events_;
}
void TimelineBuilder::nvtx(std::uint32_t r, std::string_view name, TimeNs start, TimeNs end) {
  rank(r).nvtx[0].push_back({start, std::max(start, end), strings_.intern(name), 0});
  ++events_;
}
void TimelineBuilder::lane_name(std::uint32_t r, LaneKind kind, std::uint32_t stream, std::string_view name) {
  RankParts& p = rank(r);
  std::string& slot = p.lane_names[{static_cast<std::uint8_t>(kind), stream}];
  if (slot == name) return;
  slot = std::string(name);
  p.names_changed = true;
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
  c.comm_key = comm;  // a source without CommInfo: its index, as the report keys it
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
  if (kind == LaneKind::Nvtx) return p.nvtx[stream].push_back(s);
  const std::tuple<std::uint8_t, std::uint32_t> key{static_cast<std::uint8_t>(kind), stream};
  if (last_stream_ == nullptr || last_stream_key_ != key) {
    last_stream_ = &p.streams[key];
    last_stream_key_ = key;
  }
  last_stream_->push_back(s);
}
SpanRow& TimelineBuilder::lane_spans(std::uint32_t r, LaneKind kind, std::uint32_t stream) {
  RankParts& p = rank(r);
  if (kind == LaneKind::Phase) return p.phases;
  if (kind == LaneKind::Nvtx) return p.nvtx[stream];
  return p.streams[{static_cast<std::uint8_t>(kind), stream}];
}
CounterSeries& TimelineBuilder::counter_series(std::uint32_t r, std::string_view name, std::string_view unit) {
  auto& m = rank(r).counters;
  auto it = m.find(std::string(name));
  if (it == m.end()) it = m.emplace(std::string(name), CounterSeries(std::string(name), std::string(unit))).first;
  return it->second;
}
void TimelineBuilder::memory_sample_device(std::uint32_t r, std::uint8_t device) {
  RankParts& p = rank(r);
  if (p.sample_device >= 0 && p.sample_device != device) {
    for (int m = 0; m < static_cast<int>(prof::MemMetric::Count); ++m)
      p.counters.erase(prof::mem_metric_name(static_cast<prof::MemMetric>(m)));
    p.samples_dropped = true;
  }
  p.sample_device = device;
}
void TimelineBuilder::dropped(std::uint32_t r, std::uint64_t n) { rank(r).dropped += n; }
void TimelineBuilder::step_ids_recorded(std::uint32_t r) { rank(r).step_ids = true; }
void TimelineBuilder::host(std::uint32_t r, std::string_view h) { rank(r).host = std::string(h); }
void TimelineBuilder::reserve(std::uint32_t r, LaneKind kind, std::uint32_t stream, std::size_t n) {
  RankParts& p = rank(r);
  if (kind == LaneKind::Phase) p.phases.reserve(p.phases.size() + n);
  else if (kind == LaneKind::Nvtx) p.nvtx[stream].reserve(p.nvtx[stream].size() + n);
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

prof::CollOp CollOpCache::op(const Timeline& tl, std::uint32_t name) {
  if (name >= by_name.size()) by_name.resize(name + 1, -1);
  if (by_name[name] < 0) {  // parsed once per op name, not once per collective
    prof::CollOp op = prof::CollOp::Unknown;
    prof::coll_op_from_name(tl.strings.get(name), op);
    by_name[name] = static_cast<std::int16_t>(op);
  }
  return static_cast<prof::CollOp>(by_name[name]);
}

void match_collective_group(Timeline& tl, const std::vector<CollectiveRef>& refs, CollOpCache& cache) {
  // Timed by prof::collective_timing(), as memcomm-trace report times them (Note [One analysis
  // engine], Note [Collective bandwidth] in the profiler's analysis.hpp): from the last arrival to
  // the last end. The communicator size is CommInfo's (group_size as ingested) when known.
  auto& arrivals = cache.arrivals;
  arrivals.clear();
  std::uint32_t n = static_cast<std::uint32_t>(refs.size());
  for (std::size_t k = 0; k < refs.size(); ++k) {
    const auto& c = tl.ranks[refs[k].slot].collectives[refs[k].index];
    arrivals.push_back({static_cast<std::uint32_t>(k), c.start, c.end});
    n = std::max(n, c.group_size);
  }
  const auto& first = tl.ranks[refs[0].slot].collectives[refs[0].index];
  const prof::CollOp first_op = cache.op(tl, first.op);
  const prof::CollectiveTiming t = prof::collective_timing(arrivals, first_op, first.bytes, static_cast<int>(n));
  bool disagree = false;
  for (const CollectiveRef& r : refs) {
    const auto& c = tl.ranks[r.slot].collectives[r.index];
    disagree = disagree || prof::instances_disagree(first_op, first.bytes, cache.op(tl, c.op), c.bytes);
  }
  for (std::size_t k = 0; k < refs.size(); ++k) {
    auto& c = tl.ranks[refs[k].slot].collectives[refs[k].index];
    c.group_size = n;
    c.straggler = t.straggler_rank == k;
    c.first_in_group = k == 0;
    c.ranks_disagree = disagree;
    c.skew = t.skew_ns;
    c.time = t.time_ns;
    c.algbw = t.algbw_gbps;
    c.busbw = t.busbw_gbps;
    if (k + 1 < refs.size()) {
      c.next_rank = static_cast<std::int32_t>(refs[k + 1].slot);
      c.next_index = refs[k + 1].index;
    } else {
      c.next_rank = -1;
    }
  }
}

void match_collectives(Timeline& tl) {
  // Groups by sorting (key, slot, index) rather than a hash map of vectors. Each rank's keys are
  // usually sorted already (seq grows per communicator): sort each rank's block only if it is
  // not, then merge the blocks (stable: equal keys stay in slot order), O(n log ranks).
  struct Keyed {
    CollectiveKey key;
    CollectiveRef ref;
  };
  const auto by_key = [](const Keyed& a, const Keyed& b) { return a.key < b.key; };
  std::vector<Keyed> all;
  std::size_t n = 0;
  for (const auto& rd : tl.ranks) n += rd.collectives.size();
  all.reserve(n);
  std::vector<std::size_t> blocks{0};
  for (std::uint32_t s = 0; s < tl.ranks.size(); ++s) {
    const auto& cs = tl.ranks[s].collectives;
    const std::size_t b = all.size();
    for (std::uint32_t i = 0; i < cs.size(); ++i) all.push_back({collective_key(cs[i]), {s, i}});
    if (!std::is_sorted(all.begin() + static_cast<std::ptrdiff_t>(b), all.end(), by_key))
      std::stable_sort(all.begin() + static_cast<std::ptrdiff_t>(b), all.end(), by_key);
    if (all.size() > b) blocks.push_back(all.size());
  }
  while (blocks.size() > 2) {  // merge neighbouring blocks pairwise
    std::vector<std::size_t> merged{0};
    for (std::size_t k = 0; k + 1 < blocks.size(); k += 2) {
      const std::size_t end = k + 2 < blocks.size() ? blocks[k + 2] : blocks[k + 1];
      if (k + 2 < blocks.size())
        std::inplace_merge(all.begin() + static_cast<std::ptrdiff_t>(blocks[k]), all.begin() + static_cast<std::ptrdiff_t>(blocks[k + 1]),
                           all.begin() + static_cast<std::ptrdiff_t>(end), by_key);
      merged.push_back(end);
    }
    blocks.swap(merged);
  }
  std::vector<CollectiveRef> refs;
  CollOpCache cache;
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    refs.clear();
    for (; j < all.size() && all[j].key == all[i].key; ++j) refs.push_back(all[j].ref);
    match_collective_group(tl, refs, cache);
    i = j;
  }
}

}  // namespace memcomm::view
