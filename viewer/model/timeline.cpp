#include <memcomm/view/builder.hpp>
#include <memcomm/view/timeline.hpp>

#include <algorithm>
#include <cctype>
#include <set>

#include <fmt/format.h>

namespace memcomm::view {

const char* lane_kind_name(LaneKind kind) {
  switch (kind) {
    case LaneKind::Phase: return "phase";
    case LaneKind::Kernel: return "kernel";
    case LaneKind::Memcpy: return "memcpy";
    case LaneKind::Memset: return "memset";
    case LaneKind::Collective: return "collective";
    case LaneKind::Nvtx: return "nvtx";
  }
  return "?";
}

std::size_t Lane::span_count() const {
  std::size_t n = 0;
  for (const auto& r : rows) n += r.size();
  return n;
}

const CounterSeries* RankData::counter(std::string_view name) const {
  for (const auto& c : counters)
    if (c.name() == name) return &c;
  return nullptr;
}

bool Timeline::shows_nothing() const {
  return std::all_of(ranks.begin(), ranks.end(), [](const RankData& rd) {
    const bool spans = std::any_of(rd.lanes.begin(), rd.lanes.end(), [](const Lane& l) { return l.span_count() > 0; });
    const bool samples = std::any_of(rd.counters.begin(), rd.counters.end(), [](const CounterSeries& c) { return c.size() > 0; });
    return !spans && !samples && rd.collectives.empty() && rd.alloc_events.empty() && rd.ooms.empty() &&
           rd.allocations.list.empty();
  });
}

bool records_memory(const RankData& rd) {
  return std::any_of(rd.counters.begin(), rd.counters.end(), [](const CounterSeries& c) {
    return c.size() > 0 && (c.name() == "allocated" || c.name() == "reserved" || c.name() == "active");
  });
}

std::string rank_name(const RankData& rd) {
  if (rd.snapshot_device < 0) return fmt::format("rank {}", rd.rank);
  std::string name = rd.snapshot_device == prof::kHostDevice ? std::string("host memory")
                                                              : fmt::format("device {}", rd.snapshot_device);
  // A second snapshot's device is moved off its number (Note [Rank ids across files]): the id keeps them apart.
  if (rd.rank != static_cast<std::uint32_t>(rd.snapshot_device)) name += fmt::format(" (id {})", rd.rank);
  return name;
}

std::uint32_t StringTable::intern(std::string_view s) {
  auto it = ids_.find(std::string(s));
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(strings_.size());
  strings_.emplace_back(s);
  ids_.emplace(strings_.back(), id);
  return id;
}

// Note [Rank ids across files]
// Files opened together share one list of ranks, so an id two files both use (the same file opened
// twice, two runs, a snapshot beside a run's traces) must be kept apart, and whichever moves is shown
// under a number that is not its own. A rank a run named keeps its number wherever it can: when it
// meets a stand-in (a snapshot's device, a torch.profiler trace without distributedInfo), the stand-in
// moves, whichever file came first. A moved rank takes the lowest id no loaded or incoming rank holds,
// so it never lands on a rank of the incoming file that has yet to be placed (stepping to the next
// id used to push rank 0 of a run loaded after a snapshot onto 1, and its rank 1 onto 2).
void Timeline::take_ranks(std::vector<RankData>&& incoming) {
  std::set<std::uint32_t> used;
  for (const RankData& r : ranks) used.insert(r.rank);
  for (const RankData& r : incoming) used.insert(r.rank);
  auto fresh_id = [&used] {
    std::uint32_t id = 0;
    while (used.count(id)) ++id;
    used.insert(id);
    return id;
  };
  for (RankData& rd : incoming) {
    auto held = std::find_if(ranks.begin(), ranks.end(), [&](const RankData& r) { return r.rank == rd.rank; });
    if (held != ranks.end()) (held->stand_in_id && !rd.stand_in_id ? held->rank : rd.rank) = fresh_id();
    ranks.push_back(std::move(rd));
  }
  std::sort(ranks.begin(), ranks.end(), [](const RankData& a, const RankData& b) { return a.rank < b.rank; });
}

std::vector<std::string> shown_elsewhere(const Timeline& tl, std::set<std::pair<std::string, std::uint32_t>>& told) {
  std::vector<std::string> out;
  for (const RankData& rd : tl.ranks) {
    if (rd.recorded_rank == kNoRecordedRank || rd.rank == rd.recorded_rank) continue;
    if (!told.insert({rd.source, rd.recorded_rank}).second) continue;
    out.push_back(rd.stand_in_id
                      ? fmt::format("warning: {}: its id {} (a stand-in: a snapshot's device, or a torch.profiler "
                                    "trace without distributedInfo) is shown as rank {}: another file holds id {} too",
                                    rd.source, rd.recorded_rank, rd.rank, rd.recorded_rank)
                      : fmt::format("warning: {}: rank {} is shown as rank {}: another file holds rank {} too",
                                    rd.source, rd.recorded_rank, rd.rank, rd.recorded_rank));
  }
  return out;
}

void Timeline::merge(Timeline&& other) {
  if (other.empty() && other.sources.empty()) return;
  if (ranks.empty() && strings.size() == 0) {  // into nothing: a move, not an O(spans) remap
    std::vector<std::string> mine = std::move(sources);
    std::vector<prof::RunFacts> my_runs = std::move(runs);
    *this = std::move(other);
    mine.insert(mine.end(), std::make_move_iterator(sources.begin()), std::make_move_iterator(sources.end()));
    sources = std::move(mine);
    my_runs.insert(my_runs.end(), std::make_move_iterator(runs.begin()), std::make_move_iterator(runs.end()));
    runs = std::move(my_runs);
    load_warnings.clear();
    return;
  }
  std::vector<std::uint32_t> remap(other.strings.size());
  for (std::uint32_t i = 0; i < other.strings.size(); ++i) remap[i] = strings.intern(other.strings.get(i));
  for (auto& rd : other.ranks) {
    for (auto& lane : rd.lanes)
      for (auto& row : lane.rows)
        for (auto& s : row) s.name = remap[s.name];
    for (auto& c : rd.collectives) c.op = remap[c.op];
  }
  take_ranks(std::move(other.ranks));
  if (event_count == 0 && begin == 0 && end == 0) {
    begin = other.begin;
    end = other.end;
    first_event = other.first_event;
  } else if (other.event_count > 0) {
    begin = std::min(begin, other.begin);
    end = std::max(end, other.end);
    // Each file's times count from the earliest first event; a file without one, from its begin.
    first_event = std::min(time_zero(), other.time_zero());
  }
  event_count += other.event_count;
  for (auto& s : other.sources) sources.push_back(std::move(s));
  for (auto& r : other.runs) runs.push_back(std::move(r));
  match_collectives(*this);
}

std::size_t Timeline::memory_bytes() const {
  std::size_t b = sizeof(*this) + strings.size() * 64;
  for (const auto& rd : ranks) {
    b += sizeof(rd) + rd.collectives.memory_bytes() + rd.alloc_events.memory_bytes() + rd.ooms.capacity() * sizeof(TimeNs);
    for (const auto& lane : rd.lanes)
      for (const auto& row : lane.rows) b += row.memory_bytes() + sizeof(row);
    for (const auto& c : rd.counters) b += c.memory_bytes();
    b += rd.allocations.memory_bytes() + rd.alloc_index.memory_bytes();
  }
  // A file's stacks are shared by its ranks: counted once.
  std::vector<const SnapshotStacks*> seen;
  for (const auto& rd : ranks)
    if (rd.stacks && std::find(seen.begin(), seen.end(), rd.stacks.get()) == seen.end()) {
      seen.push_back(rd.stacks.get());
      b += rd.stacks->memory_bytes();
    }
  return b;
}

}  // namespace memcomm::view
