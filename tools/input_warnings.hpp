// What every memcomm-trace subcommand says on stderr about the traces it loaded: files cut short (read
// up to their last complete chunk or event, as --help promises), ranks that look like several runs,
// and ranks whose recorder dropped events (memory figures then count lost frees' blocks as live).
#pragma once

#include "memcomm/trace/trace_set.hpp"

namespace memcomm::prof::tool {

void warn_about_inputs(const TraceSet& set);

}  // namespace memcomm::prof::tool
