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

// Appends a RangeBegin and a RangeEnd per span, nested per thread (Note [Kineto events as memcomm
// events] in kineto.hpp): a span that outlives its parent is cut at the parent's end and counted
// in `clamped`. `spans` is reordered.
void emit_nested_ranges(std::vector<HostSpan>& spans, std::vector<Event>& out, uint64_t& clamped);

}  // namespace memcomm::prof::kineto
