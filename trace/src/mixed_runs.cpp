// mixed_run_warnings: whether the loaded ranks can be one run's, from the facts each rank's file
// gives (RunFacts); TraceSet::mixed_runs gathers them for memcomm-trace, the viewer's loader for itself.
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
//     which says nothing across hosts): the ranks of one run record at the same time. A
//     torch.profiler trace on the Unix clock (epoch microseconds, or microseconds after its
//     baseTimeNanoseconds) is on the wall clock already (wall_minus_timeline); one whose clock
//     counts from boot or from 0 has no StartTime and is left out of this one;
//   - two files name the same rank of a world (the viewer shows one of them under another number,
//     Note [Rank ids across files]; memcomm-trace refuses such a pair before it gets here).
// memcomm-trace and memcomm-view warn and go on (the user may know better, e.g. a trace merged by hand).
#include "memcomm/trace/mixed_runs.hpp"

#include <fmt/format.h>

#include <map>

#include "memcomm/trace/trace_set.hpp"

namespace memcomm::prof {

namespace {

constexpr size_t kMixedRunLines = 5;  // enough to see the pattern; a mix of two big runs would say it per rank

std::string who(const RunFacts& r) { return fmt::format("rank {} ({})", r.rank, r.source); }

bool wall_known(const RunFacts& r) { return r.wall_begin && r.wall_end; }

}  // namespace

std::vector<std::string> mixed_run_warnings(const std::vector<RunFacts>& ranks) {
  std::vector<std::string> out;
  const RunFacts* sized = nullptr;  // the first rank that names its world size
  const RunFacts* timed = nullptr;  // the first rank whose wall-clock span is known
  std::map<uint32_t, const RunFacts*> named;  // ranks whose file names its world, by rank
  for (const RunFacts& r : ranks) {
    const bool in_a_world = r.world_size != 0 && r.rank != kUnknownRank;  // the file names both
    if (in_a_world) {
      const auto [first, fresh] = named.emplace(r.rank, &r);
      if (!fresh && first->second->source != r.source)
        out.push_back(fmt::format("{} and {} are both rank {}: files of different runs?", who(*first->second), who(r),
                                  r.rank));
    }
    if (in_a_world && r.rank >= r.world_size)
      out.push_back(fmt::format("{} says world size {}: a rank outside its own world", who(r), r.world_size));
    if (r.world_size != 0 && sized == nullptr) sized = &r;
    else if (r.world_size != 0 && r.world_size != sized->world_size)
      out.push_back(fmt::format("{} says world size {}, {} says {}: files of different runs?", who(*sized),
                                sized->world_size, who(r), r.world_size));
    if (!wall_known(r)) continue;
    if (timed == nullptr) {
      timed = &r;
      continue;
    }
    if (*r.wall_begin > *timed->wall_end || *timed->wall_begin > *r.wall_end)
      out.push_back(fmt::format("{} and {} never recorded at the same time: files of different runs?", who(*timed), who(r)));
  }
  if (out.size() > kMixedRunLines) {
    const size_t more = out.size() - kMixedRunLines;
    out.resize(kMixedRunLines);
    out.push_back(fmt::format("... and {} more such line(s)", more));
  }
  return out;
}

std::vector<std::string> TraceSet::mixed_runs() const {
  std::vector<RunFacts> facts;
  for (const RankTrace& r : ranks) {
    RunFacts f{r.rank, r.source, r.world_size, std::nullopt, std::nullopt};
    if (r.wall_minus_ts && !r.events.empty()) {
      f.wall_begin = *r.wall_minus_ts + r.begin_ns();
      f.wall_end = *r.wall_minus_ts + r.end_ns();
    }
    facts.push_back(std::move(f));
  }
  return mixed_run_warnings(facts);
}

}  // namespace memcomm::prof
