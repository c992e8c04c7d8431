// The time covered by a set of intervals (their union), for communication time: Note
// [Communication time] in grad_sync.cpp. Free of LibTorch, so it is unit-tested on its own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace memcomm::train {

// Nanoseconds during which at least one [start, end) interval is open; empty or reversed intervals
// count nothing.
inline int64_t busy_ns(std::vector<std::pair<int64_t, int64_t>> spans) {
  std::sort(spans.begin(), spans.end());
  int64_t total = 0, covered_until = std::numeric_limits<int64_t>::min();
  for (const auto& [start, end] : spans) {
    const int64_t from = std::max(start, covered_until);
    if (end > from) total += end - from;
    covered_until = std::max(covered_until, end);
  }
  return total;
}

}  // namespace memcomm::train
