// `memcomm-trace convert IN OUT.mct`: one input trace (a torch.profiler trace, or an .mct file) as a
// per-rank .mct file, written through TraceWriter: compact (24-byte events, compressed chunks) and
// crash-safe (Note [Crash safety] in trace_writer.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "memcomm/trace/trace_set.hpp"
#include "memcomm/trace/trace_writer.hpp"

namespace memcomm::prof::tool {

struct ConvertStats {
  uint64_t events = 0, strings = 0, chunks = 0, bytes = 0;
};

// Writes `rank` to `path` with its own string ids (so the copy reads back with the same events and
// strings), events in time order in chunks of at most `chunk_events`, the strings in the first.
// Throws TraceError when `path` cannot be written.
ConvertStats write_rank(const RankTrace& rank, const std::string& path, const WriterOptions& options,
                        size_t chunk_events = size_t(1) << 16);

// The line convert prints: what was written, and its size against the input's.
std::string convert_summary(const std::string& in, const FileLoadInfo& info, const std::string& out,
                            const ConvertStats& st);

}  // namespace memcomm::prof::tool
