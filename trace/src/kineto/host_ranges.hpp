// Host (and GPU-annotation) spans as LIFO RangeBegin/RangeEnd pairs per thread.
#pragma once

#include <cstdint>
#include <vector>

#include "memcomm/trace/event.hpp"

namespace memcomm::prof::kineto {

struct HostSpan {
  int64_t begin, end;
  uint64_t id;
  StringId name;
  uint16_t thread;
  Phase phase;
};

// Note [Host spans that overlap]
// memcomm's ranges nest LIFO per thread; Kineto's host spans on one thread mostly do, but not all:
// - with_stack=True adds python_function spans (the Python call stack) that only partly overlap the
//   ops and annotations: ProfilerStep#N begins inside the Python frame of profiler.step(), which
//   ends microseconds later, so nesting them with the ops cut every step to those microseconds.
//   The Python stack is nested on its own: it is a lane of its own per thread ("... (Python)",
//   Tracks::python_lane), where frames do nest.
// - Any other span that outlives its parent is cut at the parent's end and counted in `clamped`
//   (KinetoInfo::clamped_ranges), except a ProfilerStep: steps are what the analysis divides time
//   by, so the parents it outlives end where the step begins, and they are the ones counted.

// Appends a RangeBegin and a RangeEnd per span, nested per thread as Note [Host spans that
// overlap] says. `spans` is reordered.
void emit_nested_ranges(std::vector<HostSpan>& spans, std::vector<Event>& out, uint64_t& clamped);

}  // namespace memcomm::prof::kineto
