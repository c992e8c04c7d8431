// What the viewer says about one allocation (its hover tooltip) and who holds memory at a time
// (its "Who holds memory" pane), as data: the view draws these and --report-json writes the same
// structures, so the window and the headless report cannot disagree (issue 18's honesty rule).
//
// Stacks are StackText's lines (memory_viz's filter unless all_frames), outermost first, and the
// live bytes by site are snapshot::memory_at's: the functions `memcomm-trace memory` prints.
// A rank without stacks (.mct, torch.profiler) or an allocation without frames says "no stack".
#pragma once

#include <memcomm/snapshot/memory.hpp>
#include <memcomm/view/timeline.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace memcomm::view {

inline constexpr const char* kNoStackText = "no stack";
// Display cap of a stack (the data keeps every frame): the lines up to the one that shows it (Note
// [The line a stack is shown by] in memcomm/snapshot/frames.hpp).
inline constexpr std::size_t kStackLinesShown = 16;

struct AllocationTip {
  std::uint64_t size = 0, addr = 0;
  std::int64_t stream = 0;           // cudaStream_t for snapshots, the recorded stream otherwise
  std::string category;              // the trainer's tag, else a guess from the frames ("... (from frames)"), else ""
  TimeNs alloc_ns = 0, free_ns = 0;  // free_ns: prof::kStillLive when live at the end
  bool before_trace = false;
  bool stack_of_free = false;  // the stack is its free's (Note [A free's stack])
  std::vector<std::string> stack;    // outermost first; {"no stack"} when none
};
AllocationTip allocation_tip(const RankData& rd, std::uint32_t index, bool all_frames);
// The tooltip's text; the stack capped at kStackLinesShown lines ("... N more" outside them, and
// "... N native frames inside" the Python frame that shows it).
std::string tip_text(const AllocationTip& tip, TimeNs trace_begin);

// Live bytes by site at t, with each site's lines (memory_at; one "no stack" site without stacks).
struct HoldersAt {
  TimeNs at_ns = 0;
  std::uint64_t live_bytes = 0;
  struct Site {
    std::uint64_t bytes = 0;
    std::uint32_t count = 0;
    std::vector<std::string> stack;  // outermost first
  };
  std::vector<Site> sites;           // most bytes first
};
HoldersAt holders_at(const RankData& rd, TimeNs t);
// What grew by stack from `before` to `after` (two snapshots' ranks, or two times of one):
// snapshot::compare_sites, what `memcomm-trace compare` prints.
std::vector<snapshot::SiteChange> compare_holders(const HoldersAt& before, const HoldersAt& after);

}  // namespace memcomm::view
