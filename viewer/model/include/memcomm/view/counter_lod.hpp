// Counters (memory curves, loss, samples/s) with precomputed min/max levels, so that drawing a
// curve costs O(pixels) at any zoom.
//
// Note [Counter LOD]: level 0 is the raw samples. Level k+1 folds kFanout consecutive buckets of
// level k into one bucket that keeps the time span it covers and the min and max of the values in
// it. A query picks the finest level with at most ~2 buckets per pixel over the visible range and
// folds those buckets into per-pixel min/max. Since min/max are exact at every level, the envelope
// drawn keeps every extreme at any zoom (no spike is lost as in plain decimation), and only the
// amount of work changes. A bucket that straddles columns is opened into the level below (down to
// the samples), so each column's envelope is exact: spreading its min..max over the columns drew
// phantom bars across gaps with no samples. At most pixels - 1 buckets per level straddle a column
// edge, so a query stays O(pixels x kFanout x levels) plus the buckets it folds. The levels add
// sizeof(Bucket)/(kFanout-1) per kFanout samples: about 0.6 B per sample.
#pragma once

#include <memcomm/view/chunked.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace memcomm::view {

// One pixel column of a counter query.
struct PixelMinMax {
  double min = 0, max = 0;  // value range inside the column (the carried value when no sample)
  bool valid = false;       // false before the first sample
};

class CounterSeries {
 public:
  static constexpr std::size_t kFanout = 8;

  struct Bucket {
    std::int64_t t0, t1;  // first and last sample time covered, ns
    double min, max;      // over the covered samples
  };

  CounterSeries() = default;
  CounterSeries(std::string name, std::string unit) : name_(std::move(name)), unit_(std::move(unit)) {}

  // Samples must come in time order (the builder sorts); call build_levels() after the last one.
  void add(std::int64_t t, double v) { t_.push_back(t); v_.push_back(v); }
  void reserve(std::size_t n) {
    t_.reserve(n);
    v_.reserve(n);
  }
  void clear() {
    t_.clear();
    v_.clear();
    levels_.clear();
    global_max_ = 0;
  }
  void build_levels();
  // Brings the levels up to date after the samples from index `first_changed` on changed
  // (appended, or a merge of late samples): O(samples from there on), same result as build_levels().
  void update_levels(std::size_t first_changed);
  // Drops the samples from index n on; call update_levels(n) after adding the replacements.
  void truncate(std::size_t n);
  void shrink_to_fit();

  // Per-pixel min/max over [t0, t1) split into `pixels` equal columns. A column with no sample
  // carries the value in force (a counter is a step function). Cost O(pixels + log n).
  void query(std::int64_t t0, std::int64_t t1, int pixels, std::vector<PixelMinMax>& out) const;
  // Value in force at t (last sample at or before t); false before the first sample.
  bool value_at(std::int64_t t, double& v) const;
  // Min/max over [t0, t1], exact, O(log n + buckets).
  bool range_min_max(std::int64_t t0, std::int64_t t1, double& mn, double& mx) const;
  // The same for ranges asked in time order (the step table: one per step): `cursor` (0 at first)
  // remembers where the last range started, and the search gallops on from there, O(log distance)
  // rather than O(log n) cache misses per call; a range that starts earlier searches from the start.
  bool range_min_max(std::int64_t t0, std::int64_t t1, double& mn, double& mx, std::size_t& cursor) const;

  const std::string& name() const { return name_; }
  // The builder renames sampled memory curves that block events supersede (Note [Memory curves from block events]).
  void rename(std::string name) { name_ = std::move(name); }
  const std::string& unit() const { return unit_; }
  std::size_t size() const { return t_.size(); }
  std::int64_t time(std::size_t i) const { return t_[i]; }
  double value(std::size_t i) const { return v_[i]; }
  double global_max() const { return global_max_; }  // after build_levels()
  std::size_t level_count() const { return levels_.size() + 1; }
  std::size_t memory_bytes() const;

 private:
  // Min/max of the samples [lo, hi) and the value carried in from lo - 1.
  bool fold_range(std::size_t lo, std::size_t hi, double& mn, double& mx) const;
  // First index in [from, size()) whose time is not `before` t, galloping from `from`.
  template <class Before>
  std::size_t gallop(std::size_t from, std::int64_t t, Before before) const;

  std::string name_, unit_;
  ChunkedArray<std::int64_t> t_;         // sample times, sorted (Note [Chunked arrays]: appends never copy them)
  ChunkedArray<double> v_;               // sample values
  std::vector<ChunkedArray<Bucket>> levels_;  // levels_[k] is LOD level k+1
  double global_max_ = 0;
};

}  // namespace memcomm::view
