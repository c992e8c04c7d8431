// `memcomm-trace memory` and `memcomm-trace compare`: who holds memory in a PyTorch memory
// snapshot (memcomm/snapshot/memory.hpp), or in one rank of a memcomm or torch.profiler trace (by
// block category: those carry no stacks), as text or as JSON.
#pragma once

#include <cstddef>
#include <string>

namespace memcomm::prof::tool {

struct MemoryArgs {
  std::string at = "end";    // end | peak | seconds from the trace's begin
  bool json = false;
  bool all_frames = false;   // text and JSON: every frame, not memory_viz's filtered ones
  std::size_t rows = 20;     // text: sites shown
  int rank = -1;             // traces: the rank to read (-1: the first)
  int device = -1;           // only this device's blocks (-1: every device's, summed)
  bool segments = false;     // snapshots: the segments at the end state instead (trace_segments.hpp)
  bool events = false;       // snapshots: every event instead (trace_events.hpp)
};

// Both throw snapshot::ReadError for an unreadable snapshot and std::invalid_argument for an
// unreadable trace, a missing rank or a bad --at (the caller's exit 2 for all).
std::string memory_report(const std::string& file, const MemoryArgs& args);
std::string compare_report(const std::string& before, const std::string& after, const MemoryArgs& args);

}  // namespace memcomm::prof::tool
