#include <memcomm/view/counter_lod.hpp>

#include <algorithm>
#include <cmath>

namespace memcomm::view {

void CounterSeries::build_levels() {
  levels_.clear();
  global_max_ = 0;
  update_levels(0);
}

// Note [Counter LOD] levels are a pure function of the samples, and bucket b of level k+1 depends
// only on buckets [b*kFanout, (b+1)*kFanout) of level k: after the samples from `first_changed`
// on changed (appended, or merged in), only the buckets from first_changed / kFanout^k on are
// recomputed at each level, so an append costs O(new samples), the same levels as a full build.
void CounterSeries::update_levels(std::size_t first_changed) {
  first_changed = std::min(first_changed, t_.size());
  if (first_changed == 0) levels_.clear();
  if (t_.size() <= kFanout) {
    levels_.clear();
    global_max_ = v_.empty() ? 0 : *std::max_element(v_.begin(), v_.end());
    return;
  }
  // Level 1 from the raw samples.
  if (levels_.empty()) levels_.emplace_back();
  std::size_t from = first_changed / kFanout;  // first bucket to recompute at this level
  {
    auto& level = levels_[0];
    from = std::min(from, level.size());  // a level may be missing buckets before `from` (just made)
    level.resize(from);
    level.reserve(t_.size() / kFanout + 1);
    for (std::size_t i = from * kFanout; i < t_.size(); i += kFanout) {
      const std::size_t j = std::min(t_.size(), i + kFanout);
      const auto [mn, mx] = std::minmax_element(v_.begin() + static_cast<std::ptrdiff_t>(i), v_.begin() + static_cast<std::ptrdiff_t>(j));
      level.push_back({t_[i], t_[j - 1], *mn, *mx});
    }
  }
  std::size_t k = 1;
  for (; levels_[k - 1].size() > kFanout; ++k) {
    if (levels_.size() <= k) levels_.emplace_back();
    const auto& below = levels_[k - 1];
    auto& up = levels_[k];
    from = std::min(from / kFanout, up.size());
    up.resize(from);
    up.reserve(below.size() / kFanout + 1);
    for (std::size_t i = from * kFanout; i < below.size(); i += kFanout) {
      const std::size_t j = std::min(below.size(), i + kFanout);
      Bucket b{below[i].t0, below[j - 1].t1, below[i].min, below[i].max};
      for (std::size_t m = i + 1; m < j; ++m) {
        b.min = std::min(b.min, below[m].min);
        b.max = std::max(b.max, below[m].max);
      }
      up.push_back(b);
    }
  }
  levels_.resize(k);  // a truncation may have left a level above the top
  // The top level has at most kFanout buckets: the exact maximum in O(1) after any update.
  global_max_ = levels_.back().front().max;
  for (const Bucket& b : levels_.back()) global_max_ = std::max(global_max_, b.max);
}

void CounterSeries::truncate(std::size_t n) {
  if (n >= t_.size()) return;
  t_.resize(n);
  v_.resize(n);
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
