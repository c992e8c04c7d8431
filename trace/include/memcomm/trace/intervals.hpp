// Interval arithmetic on nanosecond spans: the breakdown's unions, intersections and differences
// (Note [Breakdown definitions] in analysis.hpp), and the trainer's own count of time in
// communication. In the trace model (memcomm_trace), not the analysis library, because the trainer
// uses it and links only the model.
#pragma once

#include <cstdint>
#include <vector>

namespace memcomm::prof {

struct Interval {
  int64_t begin;
  int64_t end;
};

// Total length of a union of intervals (any order, may overlap).
int64_t union_length(std::vector<Interval> v);
// Sorts and merges overlapping intervals in place, dropping empty ones; allocates nothing (the
// viewer's step table merges a few lists per step).
void merge_intervals(std::vector<Interval>& v);
// Total length of a merged list.
int64_t merged_length(const std::vector<Interval>& v);
// |a ∩ b| for two merged (sorted, disjoint) interval lists.
int64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b);
// Clips a merged list to [lo, hi].
std::vector<Interval> clip(const std::vector<Interval>& v, int64_t lo, int64_t hi);
// a minus b, both merged.
std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b);

}  // namespace memcomm::prof
