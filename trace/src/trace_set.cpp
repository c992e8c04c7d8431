// TraceSet loading: reads every chunk of every file, groups events by rank, then fixes up clocks.
#include "memcomm/trace/trace_set.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "memcomm/trace/event_sort.hpp"
#include "memcomm/trace/kineto.hpp"
#include "memcomm/trace/mixed_runs.hpp"

namespace memcomm::prof {

StringId RankTrace::find_string(std::string_view s) const {
  for (size_t i = 1; i < strings.size(); ++i)
    if (strings[i] == s) return StringId(i);
  return kNoString;
}

int64_t RankTrace::end_ns() const {
  int64_t end = 0;
  // Spans may end after later-starting events; scan the tail generously.
  for (const Event& e : events) end = std::max(end, event_end(e));
  return end;
}

namespace {
// Per-rank state while loading: string ids are per file, so events keep their own file's table.
struct Pending {
  RankTrace trace;
  bool merged = false;
  std::string first_file;
};
}  // namespace

void TraceSet::add_from_reader(TraceReader& reader, const LoadOptions& opt) {
  std::map<uint32_t, size_t> index;  // rank -> position in ranks (rank traces from this file)
  FileLoadInfo fi;
  fi.path = reader.name();
  fi.merged = reader.merged();
  // Single-rank files (the common case): reserve once instead of growing by copies.
  const uint64_t expected = reader.merged() ? 0 : reader.estimate_events();
  ChunkView c;
  while (reader.next(c)) {
    if (opt.progress) opt.progress(reader.name(), c.file_offset, reader.recovery().file_bytes);
    auto it = index.find(c.rank);
    if (it == index.end()) {
      for (const RankTrace& r : ranks)
        if (r.rank == c.rank && c.rank != kUnknownRank)
          throw TraceError(duplicate_rank(r, reader.name(), nullptr, {}));
      RankTrace t;
      t.rank = c.rank;
      t.source = reader.name();
      // A merged file's header speaks for the merge, not for each rank: its ranks' own WorldSize
      // events say theirs (Note [One run or several]).
      t.world_size = reader.merged() ? 0 : reader.header().world_size;
      // Merged files are already on one timeline: mark with a sentinel the offset pass skips.
      t.clock_offset_ns = reader.merged() ? INT64_MIN : 0;
      // A hint only: capped at one event per file byte so a lying header cannot force a huge allocation.
      if (expected) t.events.reserve(size_t(std::min<uint64_t>(expected, reader.recovery().file_bytes)));
      ranks.push_back(std::move(t));
      it = index.emplace(c.rank, ranks.size() - 1).first;
    }
    auto& ev = ranks[it->second].events;
    ev.insert(ev.end(), c.begin(), c.end());
  }
  for (auto& [rank, pos] : index) ranks[pos].strings = reader.strings();
  fi.recovery = reader.recovery();
  files.push_back(std::move(fi));
  (void)opt;
}

void TraceSet::finish(const LoadOptions& opt) {
  for (RankTrace& r : ranks) {
    const bool already_merged = r.clock_offset_ns == INT64_MIN;
    int64_t offset = 0;
    std::optional<std::pair<int64_t, int64_t>> start;  // StartTime: (its timestamp, the wall clock then)
    bool kineto = false;
    r.drops = 0;
    for (const Event& e : r.events) {
      if (e.kind == EventKind::Meta) {
        const auto m = e.as<MetaEvent>();
        switch (m.key) {
          case MetaKey::Rank: if (r.rank == kUnknownRank) r.rank = uint32_t(m.value); break;
          case MetaKey::WorldSize: r.world_size = uint32_t(m.value); break;
          case MetaKey::Host: r.host = std::string(r.name(m.str)); break;
          case MetaKey::ProcessName: r.process_name = std::string(r.name(m.str)); break;
          case MetaKey::Pid: r.pid = m.value; break;
          case MetaKey::ClockOffset: offset = m.value; break;
          case MetaKey::StartTime: start = std::make_pair(e.ts, m.value); break;
          case MetaKey::Tag: kineto = kineto || r.name(m.str) == kKinetoSourceTag; break;
          default: break;
        }
      } else if (e.kind == EventKind::Drops) {
        r.drops += e.as<DropEvent>().count;
      }
    }
    if (already_merged || !opt.apply_clock_offsets) offset = 0;
    offset = std::clamp<int64_t>(offset, -kMaxAbsTimestamp, kMaxAbsTimestamp);
    r.clock_offset_ns = offset;
    r.from_torch_profiler = kineto;
    // A wall-clock time is nanoseconds since 1970: 1.8e18 in 2026, past kMaxAbsTimestamp (2006), which
    // clamped every run's start to one instant and hid runs that never overlapped. Half of int64
    // (the year 2116) leaves the sums with a timeline's time inside it.
    constexpr int64_t kMaxWallNs = std::numeric_limits<int64_t>::max() / 2;
    if (start)
      r.wall_minus_ts = wall_minus_timeline(std::clamp<int64_t>(start->first, -kMaxAbsTimestamp, kMaxAbsTimestamp) + offset,
                                            std::clamp<int64_t>(start->second, -kMaxWallNs, kMaxWallNs), kineto);
    // Note [Timestamp range]: real timestamps are far inside +-kMaxAbsTimestamp; clamping what only
    // corrupt data produces keeps every later sum and difference inside int64.
    for (Event& e : r.events) e.ts = std::clamp<int64_t>(e.ts, -kMaxAbsTimestamp, kMaxAbsTimestamp) + offset;
    if (opt.sort) sort_by_time(r.events);  // Note [Nearly sorted]
  }
  std::stable_sort(ranks.begin(), ranks.end(), [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
}

TraceSet TraceSet::load(const std::vector<std::string>& paths, const LoadOptions& opt) {
  TraceSet set;
  for (const std::string& p : paths) {
    if (is_kineto_candidate(p)) {
      set.add_kineto(p, opt);
      continue;
    }
    TraceReader reader(p);
    set.add_from_reader(reader, opt);
  }
  set.finish(opt);
  return set;
}

namespace {
// The process id a trace's metadata records, -1 where none.
int64_t recorded_pid(const std::vector<Event>& events) {
  for (const Event& e : events)
    if (e.kind == EventKind::Meta && e.as<MetaEvent>().key == MetaKey::Pid) return e.as<MetaEvent>().value;
  return -1;
}
}  // namespace

// Says why two files hold one rank: the same file twice, two recordings of one process (a profiler
// schedule's cycles, one file each), or a trace whose rank is rank 0 only because its
// distributedInfo is missing.
std::string TraceSet::duplicate_rank(const RankTrace& earlier, const std::string& path, const KinetoInfo* info,
                                     const std::vector<Event>& events) const {
  std::error_code ec;
  if (std::filesystem::equivalent(earlier.source, path, ec))
    return fmt::format("'{}' is given twice (rank {})", path, earlier.rank);
  std::vector<std::string> unnamed;
  for (const FileLoadInfo& f : files)
    if (f.path == earlier.source && f.kineto && !f.kineto->rank_given) unnamed.push_back("'" + f.path + "'");
  if (info && !info->rank_given) unnamed.push_back("'" + path + "'");
  std::string s = fmt::format("rank {} appears in both '{}' and '{}'", earlier.rank, earlier.source, path);
  if (!unnamed.empty())
    s += fmt::format(" ({} {} no distributedInfo rank, and such a torch.profiler trace counts as rank 0)",
                     fmt::join(unnamed, " and "), unnamed.size() == 1 ? "has" : "have");
  if (const int64_t pid = recorded_pid(events); pid >= 0 && pid == recorded_pid(earlier.events))
    s += fmt::format(": both were recorded by process {}, so they are two recordings of one rank (a torch.profiler "
                     "schedule with repeat writes a file per cycle); give them one at a time", pid);
  return s;
}

void TraceSet::add_kineto(const std::string& path, const LoadOptions& opt) {
  KinetoOptions ko;
  if (!opt.comm_kernels.empty()) ko.comm_kernels = opt.comm_kernels;
  KinetoTrace k = read_kineto(path, ko);
  for (const RankTrace& r : ranks)
    if (r.rank == k.trace.rank) throw TraceError(duplicate_rank(r, path, &k.info, k.trace.events));
  FileLoadInfo fi;
  fi.path = path;
  fi.recovery.file_bytes = k.info.json_bytes;
  fi.recovery.bytes_used = k.info.truncated ? k.info.truncated_at : k.info.json_bytes;
  fi.recovery.events = k.trace.events.size();
  fi.recovery.truncated = k.info.truncated;
  // The detail leaves the file out, as the .mct reader's does: whoever prints it names the file.
  fi.recovery.detail = k.info.truncation;
  if (fi.recovery.detail.rfind(path + ": ", 0) == 0) fi.recovery.detail.erase(0, path.size() + 2);
  if (opt.progress) opt.progress(path, fi.recovery.file_bytes, fi.recovery.file_bytes);
  fi.kineto = std::make_shared<const KinetoInfo>(std::move(k.info));
  ranks.push_back(std::move(k.trace));
  files.push_back(std::move(fi));
}

uint64_t TraceSet::event_count() const {
  uint64_t n = 0;
  for (const RankTrace& r : ranks) n += r.events.size();
  return n;
}

const RankTrace* TraceSet::find_rank(uint32_t rank) const {
  for (const RankTrace& r : ranks)
    if (r.rank == rank) return &r;
  return nullptr;
}

}  // namespace memcomm::prof
