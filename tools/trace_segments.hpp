// `memcomm-trace memory --segments`: a PyTorch memory snapshot's segments at its end state, as
// torch.cuda._memory_viz's segsum summarises them (how full each segment is, and how its free bytes
// are split), as text or JSON.
#pragma once

#include <string>

#include "trace_memory.hpp"

namespace memcomm::prof::tool {

// Throws snapshot::ReadError for an unreadable snapshot and std::invalid_argument for a file that is
// no snapshot or options that do not apply (--at other than end, --rank); the caller's exit 2.
std::string segments_report(const std::string& file, const MemoryArgs& args);
// `memcomm-trace compare --segments`: the segments only in BEFORE and only in AFTER, per device, as
// memory_viz's compare lists them (only_before, only_after), with segments_report's columns.
std::string segments_compare_report(const std::string& before, const std::string& after, const MemoryArgs& args);

}  // namespace memcomm::prof::tool
