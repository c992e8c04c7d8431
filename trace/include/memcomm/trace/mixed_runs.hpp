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
  // Wall-clock span of the recording, ns since the epoch; none when the file carries no StartTime
  // (a torch.profiler trace whose clock counts from boot or from 0 has none).
  std::optional<int64_t> wall_begin, wall_end;
};

// A rank's wall clock minus its timeline time, from its StartTime record (at timeline time `ts`,
// holding `value`). A recorder's StartTime is a reading of the wall clock taken at `ts`. A
// torch.profiler trace's is the fixed origin its Unix-clock timestamps were moved to (Note [One
// origin for every torch.profiler trace] in trace/src/kineto/converter.hpp): its times are already
// wall-clock times after that origin, wherever the record stands (and no ClockOffset moves them:
// only memcomm's merge writes one).
inline int64_t wall_minus_timeline(int64_t ts, int64_t value, bool torch_profiler) {
  return torch_profiler ? value : value - ts;
}

// A line per sign (at most a handful, then a count), empty when nothing says the ranks were
// recorded by different runs.
std::vector<std::string> mixed_run_warnings(const std::vector<RunFacts>& ranks);

}  // namespace memcomm::prof
