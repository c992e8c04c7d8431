// The indexes memcomm-view builds over a loaded Timeline before showing it: allocator checkpoints
// per rank (Note [Incremental allocator state]), the step table and the summary.
#pragma once

#include <memcomm/view/allocator_state.hpp>
#include <memcomm/view/analysis.hpp>
#include <memcomm/view/timeline.hpp>

#include <memory>
#include <vector>

namespace memcomm::view {

struct TimelineIndexes {
  std::vector<std::unique_ptr<AllocatorTimeline>> alloc;  // per rank slot, over tl.ranks[slot].alloc_events
  std::vector<StepRow> steps;                             // step_table(tl)
  Summary summary;                                        // summarize(tl)
};

// Builds them as independent jobs (per rank: allocator checkpoints, step rows; then the summary)
// on this thread and one more when the machine has a second core (Note [Parallel indexes] in
// indexes.cpp). The result is what the one-thread calls give. `tl` must outlive `alloc`.
TimelineIndexes build_indexes(const Timeline& tl);

}  // namespace memcomm::view
