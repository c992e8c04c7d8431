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
SpanRow& TimelineBuilder::lane_spans(std::uint32_t r, LaneKind kind, std::uint32_t stream) {
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

double BusbwCache::factor(const Timeline& tl, std::uint32_t op, std::uint32_t n) {
  if (op >= by_op.size()) by_op.resize(op + 1, {0, 0.0});
  auto& [cached_n, f] = by_op[op];
  if (cached_n != n) {  // busbw_factor looks for op names in the string: once per (op, n), not per collective
    cached_n = n;
    f = busbw_factor(tl.strings.get(op), n);
  }
  return f;
}

void match_collective_group(Timeline& tl, const std::vector<CollectiveRef>& refs, BusbwCache& cache) {
  const auto world = static_cast<std::uint32_t>(std::max<std::size_t>(1, tl.ranks.size()));
  TimeNs first = INT64_MAX, last = INT64_MIN;
  std::size_t last_ref = 0;
  for (std::size_t k = 0; k < refs.size(); ++k) {
    const auto& c = tl.ranks[refs[k].slot].collectives[refs[k].index];
    first = std::min(first, c.start);
    if (c.start > last) {
      last = c.start;
      last_ref = k;
    }
  }
  for (std::size_t k = 0; k < refs.size(); ++k) {
    auto& c = tl.ranks[refs[k].slot].collectives[refs[k].index];
    const std::uint32_t n = refs.size() > 1 ? static_cast<std::uint32_t>(refs.size()) : (c.group_size ? c.group_size : world);
    if (refs.size() > 1) c.group_size = n;
    c.straggler = refs.size() > 1 && k == last_ref;
    c.skew = last - first;
    const double secs = static_cast<double>(std::max<TimeNs>(1, c.end - c.start)) * 1e-9;
    c.algbw = static_cast<double>(c.bytes) / secs / 1e9;
    c.busbw = c.algbw * cache.factor(tl, c.op, n);
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
    std::uint64_t key;
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
    for (std::uint32_t i = 0; i < cs.size(); ++i) all.push_back({collective_key(cs[i].comm, cs[i].seq), {s, i}});
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
  BusbwCache cache;
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    refs.clear();
    for (; j < all.size() && all[j].key == all[i].key; ++j) refs.push_back(all[j].ref);
    match_collective_group(tl, refs, cache);
    i = j;
  }
}

}  // namespace memcomm::view
