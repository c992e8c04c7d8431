// Percentiles of measured samples (step times, frame times): one rule in every tool.
//
// Note [Nearest-rank percentile]
// percentile(v, p) is the nearest-rank percentile: the smallest sample x such that at least a
// fraction p of the samples are <= x, i.e. the ceil(p x n)-th smallest (1-based), clamped to
// [1, n]. It is always a sample that was measured (no interpolation between two runs' times),
// p = 1 is the maximum and p = 0 the minimum, and p50 of an even count is the lower middle value.
// Example, v = {10, 20, 30, 40}: p50 = 20, p75 = 30, p95 = 40.
#pragma once

#include <vector>

namespace memcomm {

// Note [Nearest-rank percentile]; p in [0, 1] (clamped), 0 for no samples. Takes a copy to sort.
double percentile(std::vector<double> samples, double p);
// The same on samples already sorted ascending, without a copy (several percentiles of one set).
double percentile_sorted(const std::vector<double>& sorted, double p);

}  // namespace memcomm
