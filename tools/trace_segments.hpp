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

}  // namespace memcomm::prof::tool
