// TraceSet: one or more .mct files loaded into memory, one RankTrace per rank, on one timeline.
//
// Loading applies each rank's MetaKey::ClockOffset (Note [Merging ranks] in event.hpp) unless the
// file is already merged, and sorts each rank's events by time (stable, so same-time events keep
// recording order). This is what memcomm-trace, the analysis library and the viewer work from.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memcomm/trace/trace_reader.hpp"

namespace memcomm::prof {

// Loaded timestamps are clamped to +-kMaxAbsTimestamp (about 36 years) before the clock offset
// (itself clamped alike) is added: only corrupt data lies outside, and the bound keeps analysis
// arithmetic free of overflow.
inline constexpr int64_t kMaxAbsTimestamp = int64_t(1) << 60;

struct RankTrace {
  uint32_t rank = kUnknownRank;
  uint32_t world_size = 0;
  std::string host;                 // MetaKey::Host, "" when not recorded
  std::string process_name;
  int64_t pid = -1;
  int64_t clock_offset_ns = 0;      // the offset that was applied to `events`
  std::vector<std::string> strings; // string table, indexed by StringId
  std::vector<Event> events;        // sorted by ts, on the common timeline
  std::string source;               // file it came from
  uint64_t drops = 0;               // sum of DropEvent counts
  // Wall-clock ns minus a timestamp on the common timeline, from MetaKey::StartTime
  // (wall_minus_timeline in mixed_runs.hpp); none when not recorded.
  std::optional<int64_t> wall_minus_ts;
  bool from_torch_profiler = false;  // converted from a torch.profiler trace (MetaKey::Tag kKinetoSourceTag)

  std::string_view name(StringId id) const {
    return id < strings.size() ? std::string_view(strings[id]) : std::string_view();
  }
  // Finds (or, with create, appends) a string; the id is valid in this rank's table.
  StringId find_string(std::string_view s) const;
  int64_t begin_ns() const { return events.empty() ? 0 : events.front().ts; }
  int64_t end_ns() const;           // latest end (ts + duration for spans)
};

struct KinetoInfo;

struct FileLoadInfo {
  std::string path;
  RecoveryInfo recovery;
  bool merged = false;
  std::shared_ptr<const KinetoInfo> kineto;  // set for torch.profiler traces (kineto.hpp)
};

struct LoadOptions {
  bool apply_clock_offsets = true;
  bool sort = true;
  std::string comm_kernels;  // torch.profiler traces: communication-kernel regex ("" = the default)
  // Called as each file is read: its path, bytes read so far and its size (a chunk at a time for .mct
  // files, once at the end for torch.profiler traces). For progress displays; may be empty.
  std::function<void(const std::string& path, uint64_t done, uint64_t total)> progress;
};

struct TraceSet {
  std::vector<RankTrace> ranks;     // ordered by rank
  std::vector<FileLoadInfo> files;  // one per input file, with what was recovered

  // Loads files (per-rank or merged .mct files and torch.profiler traces, in any mix; kineto.hpp).
  // Throws TraceError; a truncated tail is not an
  // error (see files[i].recovery). Two inputs claiming the same rank are an error.
  static TraceSet load(const std::vector<std::string>& paths, const LoadOptions& opt = {});

  // Adds events for one rank from an already-open reader (used by load and by tests).
  void add_from_reader(TraceReader& reader, const LoadOptions& opt);
  // Adds a torch.profiler trace (one rank).
  void add_kineto(const std::string& path, const LoadOptions& opt);
  void finish(const LoadOptions& opt);  // sorts, applies offsets, fills metadata fields

  uint64_t event_count() const;
  const RankTrace* find_rank(uint32_t rank) const;
  // Signs that the ranks were not recorded by one run (Note [One run or several]), a line each;
  // empty when nothing says so.
  std::vector<std::string> mixed_runs() const;

 private:
  // The error for a rank that `path` holds and `earlier` (an input already loaded) holds too;
  // `info` is `path`'s torch.profiler facts, null for an .mct file, and `events` what it holds.
  std::string duplicate_rank(const RankTrace& earlier, const std::string& path, const KinetoInfo* info,
                             const std::vector<Event>& events) const;
};

}  // namespace memcomm::prof
