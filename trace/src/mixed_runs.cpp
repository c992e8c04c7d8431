// TraceSet::mixed_runs: whether the loaded ranks can be one run's.
//
// Note [One run or several]: the tools take any files they are given, and a directory of traces
// often holds several runs (run.rank0.mct from yesterday beside run.rank1.mct from today). Nothing
// stops them from being read together; the analysis then matches collectives and clocks across
// runs that never met, and its figures are nonsense with no error. Three facts in the files say so
// without any threshold:
//   - the ranks disagree on the world size;
//   - a rank is outside the world its own file names;
//   - two ranks' recordings never overlapped in wall-clock time (their first and last timestamps
//     moved by the wall clock their StartTime read; the timestamps are each host's CLOCK_MONOTONIC,
//     which says nothing across hosts): the ranks of one run record at the same time. torch.profiler
//     traces carry no such reading and are left out of this one.
// The tools warn and go on (the user may know better, e.g. a trace merged by hand).
#include "memcomm/trace/trace_set.hpp"

#include <fmt/format.h>

namespace memcomm::prof {

namespace {

constexpr size_t kMixedRunLines = 5;  // enough to see the pattern; a mix of two big runs would say it per rank

std::string who(const RankTrace& r) { return fmt::format("rank {} ({})", r.rank, r.source); }

struct WallSpan {
  int64_t begin = 0, end = 0;
  bool known = false;
};

WallSpan wall_span(const RankTrace& r) {
  if (!r.wall_minus_ts || r.events.empty()) return {};
  return {*r.wall_minus_ts + r.begin_ns(), *r.wall_minus_ts + r.end_ns(), true};
}

}  // namespace

std::vector<std::string> TraceSet::mixed_runs() const {
  std::vector<std::string> out;
  const RankTrace* sized = nullptr;  // the first rank that names its world size
  const RankTrace* timed = nullptr;  // the first rank whose wall-clock span is known
  for (const RankTrace& r : ranks) {
    if (r.world_size != 0 && r.rank != kUnknownRank && r.rank >= r.world_size)
      out.push_back(fmt::format("{} says world size {}: a rank outside its own world", who(r), r.world_size));
    if (r.world_size != 0 && sized == nullptr) sized = &r;
    else if (r.world_size != 0 && r.world_size != sized->world_size)
      out.push_back(fmt::format("{} says world size {}, {} says {}: files of different runs?", who(*sized),
                                sized->world_size, who(r), r.world_size));
    const WallSpan w = wall_span(r);
    if (!w.known) continue;
    if (timed == nullptr) {
      timed = &r;
      continue;
    }
    const WallSpan t = wall_span(*timed);
    if (w.begin > t.end || t.begin > w.end)
      out.push_back(fmt::format("{} and {} never recorded at the same time: files of different runs?", who(*timed), who(r)));
  }
  if (out.size() > kMixedRunLines) {
    const size_t more = out.size() - kMixedRunLines;
    out.resize(kMixedRunLines);
    out.push_back(fmt::format("... and {} more such line(s)", more));
  }
  return out;
}

}  // namespace memcomm::prof
