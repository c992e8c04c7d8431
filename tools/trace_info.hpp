// `memcomm-trace info`: what is in each file. .mct files are read chunk by chunk (no full load);
// torch.profiler traces are converted, and described with what the conversion kept and skipped.
#pragma once

#include <string>
#include <vector>

namespace memcomm::prof::tool {

// Prints the summary of each file; returns false if any file could not be read.
bool print_info(const std::vector<std::string>& files, bool json);

}  // namespace memcomm::prof::tool
