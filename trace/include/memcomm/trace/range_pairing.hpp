// Which open range a RangeEnd closes: one rule for every reader of ranges (the analysis's
// pair_ranges, the viewer's ingest).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "memcomm/trace/event.hpp"

namespace memcomm::prof {

// Note [Pairing a range's end]
// A RangeEnd closes the innermost range its thread has open with the same phase, and only that one:
// the ranges opened inside it stay open. Writers nest their ranges, but they do not always write them
// in the order they nest: the Python profiler opens a step at its first training event and dates its
// begin back to the forward that marked it, so a step can be written after the begin of a forward it
// holds (Note [A forward that opens no step] in python/memcomm/_profiler/hooks.py), and a recorder
// that dropped events loses some begins and ends. Popping the innermost range whatever its phase
// ended such a step with its forward (the viewer drew python -m memcomm steps as short as their
// forwards, where memcomm-trace, which sorts events by time first, gave each its whole iteration).
// An end with no open range of its phase (its begin came before the trace did) closes nothing.
// Returns the index in `open` (outermost first) of the range `end_phase` closes.
template <class Open, class PhaseOf>
std::optional<std::size_t> range_closed_by(const std::vector<Open>& open, Phase end_phase, PhaseOf phase_of) {
  for (std::size_t k = open.size(); k-- > 0;)
    if (phase_of(open[k]) == end_phase) return k;
  return std::nullopt;
}

}  // namespace memcomm::prof
