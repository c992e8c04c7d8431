// What every memcomm-trace subcommand says on stderr about the traces it loaded: files cut short (read
// up to their last complete chunk or event, as --help promises), files that hold no event, ranks that
// look like several runs, ranks that launched kernels the trace did not record (their breakdown
// counts no device compute), and ranks whose recorder dropped events (memory figures then count
// lost frees' blocks as live).
#pragma once

#include <cstdint>
#include <string>

#include "memcomm/trace/trace_set.hpp"

namespace memcomm::prof::tool {

void warn_about_inputs(const TraceSet& set);
// The part of it info says for each file it describes.
void warn_if_empty(const std::string& path, uint64_t events, bool torch_profiler);

}  // namespace memcomm::prof::tool
