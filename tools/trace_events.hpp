// `memcomm-trace memory --events`: a PyTorch memory snapshot's trace, event by event, as
// torch.cuda._memory_viz's `trace` lists it, with the bytes live and reserved after each event.
#pragma once

#include <cstdio>
#include <string>

#include "trace_memory.hpp"

namespace memcomm::prof::tool {

// Writes the listing to `out` as it goes (a trace can hold millions of events). Throws
// snapshot::ReadError for an unreadable snapshot and std::invalid_argument for a file that is no
// snapshot or options that do not apply; the caller's exit 2 for both.
void print_events(const std::string& file, const MemoryArgs& args, std::FILE* out);

}  // namespace memcomm::prof::tool
