#include <memcomm/view/counter_lod.hpp>

#include <algorithm>
#include <cmath>

namespace memcomm::view {

void CounterSeries::build_levels() {
  levels_.clear();
  global_max_ = v_.empty() ? 0 : *std::max_element(v_.begin(), v_.end());
  if (t_.size() <= kFanout) return;
  // Level 1 from the raw samples.
  std::vector<Bucket> level;
  level.reserve(t_.size() / kFanout + 1);
  for (std::size_t i = 0; i < t_.size(); i += kFanout) {
    const std::size_t j = std::min(t_.size(), i + kFanout);
    const auto [mn, mx] = std::minmax_element(v_.begin() + i, v_.begin() + j);
    level.push_back({t_[i], t_[j - 1], *mn, *mx});
  }
  levels_.push_back(std::move(level));
  while (levels_.back().size() > kFanout) {
    const auto& below = levels_.back();
    std::vector<Bucket> up;
    up.reserve(below.size() / kFanout + 1);
    for (std::size_t i = 0; i < below.size(); i += kFanout) {
      const std::size_t j = std::min(below.size(), i + kFanout);
      Bucket b{below[i].t0, below[j - 1].t1, below[i].min, below[i].max};
      for (std::size_t k = i + 1; k < j; ++k) {
        b.min = std::min(b.min, below[k].min);
        b.max = std::max(b.max, below[k].max);
      }
      up.push_back(b);
    }
    levels_.push_back(std::move(up));
  }
}

void CounterSeries::shrink_to_fit() {
  t_.shrink_to_fit();
  v_.shrink_to_fit();
  for (auto& l : levels_) l.shrink_to_fit();
}

std::size_t CounterSeries::memory_bytes() const {
  std::size_t b = sizeof(*this) + t_.capacity() * sizeof(std::int64_t) + v_.capacity() * sizeof(double);
  for (const auto& l : levels_) b += l.capacity() * sizeof(Bucket);
  return b;
}

bool CounterSeries::value_at(std::int64_t t, double& v) const {
  auto it = std::upper_bound(t_.begin(), t_.end(), t);
  if (it == t_.begin()) return false;
  v = v_[static_cast<std::size_t>(it - t_.begin()) - 1];
  return true;
}

namespace {
inline void fold(PixelMinMax& p, double mn, double mx) {
  if (!p.valid) {
    p = {mn, mx, true};
  } else {
    p.min = std::min(p.min, mn);
    p.max = std::max(p.max, mx);
  }
}
}  // namespace

void CounterSeries::query(std::int64_t t0, std::int64_t t1, int pixels, std::vector<PixelMinMax>& out) const {
  out.assign(static_cast<std::size_t>(std::max(pixels, 0)), PixelMinMax{});
  if (pixels <= 0 || t1 <= t0 || t_.empty()) return;
  const double px_per_ns = pixels / static_cast<double>(t1 - t0);
  auto col = [&](std::int64_t t) {
    return std::clamp(static_cast<long>(std::floor((t - t0) * px_per_ns)), 0L, static_cast<long>(pixels - 1));
  };
  const std::size_t lo = static_cast<std::size_t>(std::lower_bound(t_.begin(), t_.end(), t0) - t_.begin());
  const std::size_t hi = static_cast<std::size_t>(std::lower_bound(t_.begin(), t_.end(), t1) - t_.begin());
  // Level choice: samples per level-k bucket is kFanout^k; take the finest with <= 2 per pixel.
  std::size_t level = 0;
  double per_bucket = 1;
  while (level < levels_.size() && static_cast<double>(hi - lo) / per_bucket > 2.0 * pixels) {
    ++level;
    per_bucket *= kFanout;
  }
  if (level == 0) {
    for (std::size_t i = lo; i < hi; ++i) fold(out[static_cast<std::size_t>(col(t_[i]))], v_[i], v_[i]);
  } else {
    const auto& bl = levels_[level - 1];
    const auto stride = static_cast<std::size_t>(per_bucket);
    // Buckets wholly inside [lo, hi) come from the level; the partial ones at both ends from raw samples.
    const std::size_t blo = (lo + stride - 1) / stride, bhi = hi / stride;
    if (blo >= bhi) {
      for (std::size_t i = lo; i < hi; ++i) fold(out[static_cast<std::size_t>(col(t_[i]))], v_[i], v_[i]);
    } else {
      for (std::size_t i = lo; i < blo * stride; ++i) fold(out[static_cast<std::size_t>(col(t_[i]))], v_[i], v_[i]);
      for (std::size_t b = blo; b < bhi; ++b) {
        const Bucket& k = bl[b];
        for (long c = col(k.t0), e = col(k.t1); c <= e; ++c) fold(out[static_cast<std::size_t>(c)], k.min, k.max);
      }
      for (std::size_t i = bhi * stride; i < hi; ++i) fold(out[static_cast<std::size_t>(col(t_[i]))], v_[i], v_[i]);
    }
  }
  // A counter is a step function: each column also holds the value in force at its left edge
  // (the last sample before it). One binary search per column keeps this O(pixels log n).
  std::size_t from = 0;
  for (int c = 0; c < pixels; ++c) {
    const auto left = t0 + static_cast<std::int64_t>(std::ceil(c / px_per_ns));
    const auto j = static_cast<std::size_t>(
        std::lower_bound(t_.begin() + static_cast<std::ptrdiff_t>(from), t_.begin() + static_cast<std::ptrdiff_t>(hi), left) - t_.begin());
    from = j;
    if (j > 0) fold(out[static_cast<std::size_t>(c)], v_[j - 1], v_[j - 1]);
  }
}

bool CounterSeries::range_min_max(std::int64_t t0, std::int64_t t1, double& mn, double& mx) const {
  std::vector<PixelMinMax> one;
  query(t0, t1 + 1, 1, one);
  if (one.empty() || !one[0].valid) return false;
  mn = one[0].min;
  mx = one[0].max;
  return true;
}

}  // namespace memcomm::view
