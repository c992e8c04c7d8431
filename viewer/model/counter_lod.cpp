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
    global_max_ = v_.empty() ? 0 : v_[0];
    for (std::size_t i = 1; i < v_.size(); ++i) global_max_ = std::max(global_max_, v_[i]);
    return;
  }
  // Level 1 from the raw samples.
  if (levels_.empty()) levels_.emplace_back();
  std::size_t from = first_changed / kFanout;  // first bucket to recompute at this level
  {
    auto& level = levels_[0];
    from = std::min(from, level.size());  // a level may be missing buckets before `from` (just made)
    level.truncate(from);
    level.reserve(t_.size() / kFanout + 1);
    // kFanout divides the chunk size, so a bucket's samples lie in one chunk: plain pointers.
    static_assert(decltype(v_)::kChunk % kFanout == 0 && decltype(t_)::kChunk == decltype(v_)::kChunk);
    for (std::size_t i = from * kFanout; i < t_.size(); i += kFanout) {
      const std::size_t j = std::min(t_.size(), i + kFanout);
      const double* v = &v_[i];
      double mn = v[0], mx = v[0];
      for (std::size_t m = 1; m < j - i; ++m) {
        mn = std::min(mn, v[m]);
        mx = std::max(mx, v[m]);
      }
      level.push_back({t_[i], t_[j - 1], mn, mx});
    }
  }
  std::size_t k = 1;
  for (; levels_[k - 1].size() > kFanout; ++k) {
    if (levels_.size() <= k) levels_.emplace_back();
    const auto& below = levels_[k - 1];
    auto& up = levels_[k];
    from = std::min(from / kFanout, up.size());
    up.truncate(from);
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
  t_.truncate(n);
  v_.truncate(n);
}

void CounterSeries::shrink_to_fit() {
  t_.shrink_to_fit();
  v_.shrink_to_fit();
  for (auto& l : levels_) l.shrink_to_fit();
}

std::size_t CounterSeries::memory_bytes() const {
  std::size_t b = sizeof(*this) + t_.memory_bytes() + v_.memory_bytes();
  for (const auto& l : levels_) b += l.memory_bytes();
  return b;
}

bool CounterSeries::value_at(std::int64_t t, double& v) const {
  const std::size_t n = lower_bound_index(t_, t, [](std::int64_t s, std::int64_t x) { return s <= x; });  // upper bound
  if (n == 0) return false;
  v = v_[n - 1];
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
  const auto less = [](std::int64_t s, std::int64_t x) { return s < x; };
  const std::size_t lo = lower_bound_index(t_, t0, less);
  const std::size_t hi = lower_bound_index(t_, lo, t_.size(), t1, less);
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
    const auto stride = static_cast<std::size_t>(per_bucket);
    // Buckets wholly inside [lo, hi) come from the level; the partial ones at both ends from raw samples.
    const std::size_t blo = (lo + stride - 1) / stride, bhi = hi / stride;
    if (blo >= bhi) {
      for (std::size_t i = lo; i < hi; ++i) fold(out[static_cast<std::size_t>(col(t_[i]))], v_[i], v_[i]);
    } else {
      for (std::size_t i = lo; i < blo * stride; ++i) fold(out[static_cast<std::size_t>(col(t_[i]))], v_[i], v_[i]);
      // A bucket within one column folds into it. One that spans several columns is opened into the
      // level below, down to the samples if need be: its min..max spread over every column it
      // touches drew a full-height bar across a gap with no samples (a counter holds its value
      // there: the step pass below fills it). Buckets are disjoint in time, so at most pixels - 1 of
      // them per level cross a column edge: O(pixels x kFanout x levels) more work at most.
      const auto draw = [&](auto& self, std::size_t k, std::size_t b) -> void {
        if (k == 0) {
          fold(out[static_cast<std::size_t>(col(t_[b]))], v_[b], v_[b]);
          return;
        }
        const Bucket& u = levels_[k - 1][b];
        const long c0 = col(u.t0);
        if (c0 == col(u.t1)) {
          fold(out[static_cast<std::size_t>(c0)], u.min, u.max);
          return;
        }
        const std::size_t below = k == 1 ? t_.size() : levels_[k - 2].size();
        for (std::size_t i = b * kFanout, e = std::min(below, (b + 1) * kFanout); i < e; ++i) self(self, k - 1, i);
      };
      for (std::size_t b = blo; b < bhi; ++b) draw(draw, level, b);
      for (std::size_t i = bhi * stride; i < hi; ++i) fold(out[static_cast<std::size_t>(col(t_[i]))], v_[i], v_[i]);
    }
  }
  // A counter is a step function: each column also holds the value in force at its left edge
  // (the last sample before it). One binary search per column keeps this O(pixels log n).
  std::size_t from = 0;
  for (int c = 0; c < pixels; ++c) {
    const auto left = t0 + static_cast<std::int64_t>(std::ceil(c / px_per_ns));
    const std::size_t j = lower_bound_index(t_, from, hi, left, less);
    from = j;
    if (j > 0) fold(out[static_cast<std::size_t>(c)], v_[j - 1], v_[j - 1]);
  }
}

// What query(t0, t1 + 1, 1, ...) gives for its one column (the value in force at t0 and the samples
// in [t0, t1]), without its allocation: the step table asks this once per step. The samples are
// covered by the largest aligned buckets that fit, as in a segment tree: O(kFanout x levels).
bool CounterSeries::range_min_max(std::int64_t t0, std::int64_t t1, double& mn, double& mx) const {
  if (t_.empty() || t1 < t0) return false;
  const std::size_t lo = lower_bound_index(t_, t0, [](std::int64_t s, std::int64_t x) { return s < x; });
  const std::size_t hi = lower_bound_index(t_, lo, t_.size(), t1, [](std::int64_t s, std::int64_t x) { return s <= x; });
  return fold_range(lo, hi, mn, mx);
}

template <class Before>
std::size_t CounterSeries::gallop(std::size_t from, std::int64_t t, Before before) const {
  const std::size_t n = t_.size();
  std::size_t step = 1, hi = from;
  while (hi < n && before(t_[hi], t)) {
    from = hi + 1;
    hi += step;
    step *= 2;
  }
  return lower_bound_index(t_, from, std::min(hi, n), t, before);
}

bool CounterSeries::range_min_max(std::int64_t t0, std::int64_t t1, double& mn, double& mx, std::size_t& cursor) const {
  if (t_.empty() || t1 < t0) return false;
  const auto less = [](std::int64_t s, std::int64_t x) { return s < x; };
  // The cursor is valid when every sample before it is earlier than t0.
  if (cursor > t_.size() || (cursor > 0 && t_[cursor - 1] >= t0)) cursor = 0;
  const std::size_t lo = gallop(cursor, t0, less);
  const std::size_t hi = gallop(lo, t1, [](std::int64_t s, std::int64_t x) { return s <= x; });
  cursor = lo;
  return fold_range(lo, hi, mn, mx);
}

bool CounterSeries::fold_range(std::size_t lo, std::size_t hi, double& mn, double& mx) const {
  PixelMinMax p;
  if (lo > 0) fold(p, v_[lo - 1], v_[lo - 1]);  // carried into the range
  for (std::size_t i = lo; i < hi;) {
    std::size_t k = 0, stride = 1;
    while (k < levels_.size() && i % (stride * kFanout) == 0 && i + stride * kFanout <= hi) {
      ++k;
      stride *= kFanout;
    }
    if (k == 0) {
      fold(p, v_[i], v_[i]);
    } else {
      const Bucket& b = levels_[k - 1][i / stride];
      fold(p, b.min, b.max);
    }
    i += stride;
  }
  if (!p.valid) return false;
  mn = p.min;
  mx = p.max;
  return true;
}

}  // namespace memcomm::view
