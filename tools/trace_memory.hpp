// `memcomm-trace memory` and `memcomm-trace compare`: who holds memory in a PyTorch memory
// snapshot (memcomm/snapshot/memory.hpp), as text or as JSON.
#pragma once

#include <cstddef>
#include <string>

namespace memcomm::prof::tool {

struct MemoryArgs {
  std::string at = "end";    // end | peak | seconds from the trace's begin
  bool json = false;
  bool all_frames = false;   // text and JSON: every frame, not memory_viz's filtered ones
  std::size_t rows = 20;     // text: sites shown
};

// Both throw snapshot::ReadError for an unreadable file and std::invalid_argument for a bad --at
// (the caller's exit 2).
std::string memory_report(const std::string& file, const MemoryArgs& args);
std::string compare_report(const std::string& before, const std::string& after, const MemoryArgs& args);

}  // namespace memcomm::prof::tool
