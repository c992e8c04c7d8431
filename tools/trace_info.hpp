// `memcomm-trace info`: what is in each file, read chunk by chunk (no full load).
#pragma once

#include <string>
#include <vector>

namespace memcomm::prof::tool {

// Prints the summary of each file; returns false if any file could not be read.
bool print_info(const std::vector<std::string>& files, bool json);

}  // namespace memcomm::prof::tool
