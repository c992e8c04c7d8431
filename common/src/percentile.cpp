// Note [Nearest-rank percentile] in percentile.hpp.
#include "memcomm/common/percentile.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace memcomm {

double percentile_sorted(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double n = static_cast<double>(sorted.size());
  const double rank = std::ceil(std::clamp(p, 0.0, 1.0) * n);  // 1-based; 0 only for p = 0
  const auto i = static_cast<std::size_t>(std::clamp(rank, 1.0, n)) - 1;
  return sorted[i];
}

double percentile(std::vector<double> samples, double p) {
  std::sort(samples.begin(), samples.end());
  return percentile_sorted(samples, p);
}

}  // namespace memcomm
