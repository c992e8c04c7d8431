// Chrome trace / Perfetto JSON export (the "JSON Array/Object Format" both UIs load).
//
// Layout: one process (pid) per rank, named "rank N (host)". Inside it:
//   tid = host thread index       ranges (phases, NVTX) as X slices; launches and host syncs
//   tid = 100000 + dev*256 + str  GPU streams (named as the source names them): kernels, memcpy,
//                                 memset and syncs on a stream as X slices
//   tid = 200000 + k*256 + comm   collectives (start..end) as X slices, enqueue as instants; k = 0,
//                                 and k > 0 for one that overlaps an earlier one still running
//                                 (DDP's buckets): a lane's slices must nest, and Perfetto drops
//                                 one that overlaps another without nesting
// Memory is a "C" counter track per rank (allocated / reserved / active bytes), fragmentation a
// second one; named counters (loss, samples/s) get one track each; OOMs are instants.
// Flows: each Launch to the kernel/memcpy/memset with the same correlation id, and each matched
// collective from rank to rank in the order they began (an arrow that pointed back in time, as
// rank order gave where a later rank began first, is one Perfetto drops), so Perfetto draws arrows
// across processes. Names are JSON strings whatever bytes the trace holds: invalid UTF-8 (a thread
// name the kernel cut inside a character) becomes U+FFFD.
// Times are microseconds from the earliest event of the set (the "t0" in otherData), whose
// "producer" is kChromeExportProducer: the torch.profiler reader refuses such a file, since its events
// read as torch.profiler's would give other figures.
#pragma once

#include <cstdio>
#include <functional>
#include <string>

#include "memcomm/trace/trace_set.hpp"

namespace memcomm::prof {

inline constexpr const char* kChromeExportProducer = "memcomm-trace";

struct ChromeExportStats {
  uint64_t slices = 0, counters = 0, flows = 0, instants = 0;
};

// Writes the set as JSON to `out`. Throws TraceError on a write error.
// `progress` (may be empty) is called after each rank with the share of ranks written.
ChromeExportStats export_chrome(const TraceSet& set, std::FILE* out, const std::function<void(double)>& progress = {});
ChromeExportStats export_chrome(const TraceSet& set, const std::string& path,
                                const std::function<void(double)>& progress = {});

}  // namespace memcomm::prof
