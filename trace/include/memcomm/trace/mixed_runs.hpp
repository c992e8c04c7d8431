// Signs that files read together were recorded by more than one run (Note [One run or several] in
// trace/src/mixed_runs.cpp). memcomm-trace asks through TraceSet::mixed_runs(); the viewer, which
// reads files through its own ingest, collects the same facts per rank and asks here too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memcomm/trace/trace_format.hpp"

namespace memcomm::prof {

// What one rank's file says about the run that recorded it.
struct RunFacts {
  uint32_t rank = kUnknownRank;
  std::string source;       // the file, for the warning
  uint32_t world_size = 0;  // 0: the file does not say
  // Wall-clock span of the recording, ns since the epoch; none when the file carries no wall-clock
  // reading (no StartTime, or a torch.profiler trace, whose StartTime is a shared origin).
  std::optional<int64_t> wall_begin, wall_end;
};

// A line per sign (at most a handful, then a count), empty when nothing says the ranks were
// recorded by different runs.
std::vector<std::string> mixed_run_warnings(const std::vector<RunFacts>& ranks);

}  // namespace memcomm::prof
