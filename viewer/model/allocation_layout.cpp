// layout_allocations (Note [Allocation bands] in allocation_layout.hpp): a sweep over the columns
// with the visible big allocations as start/end events and the live ones kept in allocation
// order; a band's rectangle is closed when its offset changes or it is freed.
#include <memcomm/view/allocation_layout.hpp>

#include <algorithm>
#include <cmath>

namespace memcomm::view {

std::int64_t column_time(const LayoutRequest& req, int column) {
  const double span = static_cast<double>(req.t1 - req.t0);
  return req.t0 + static_cast<std::int64_t>(span * (column + 0.5) / std::max(1, req.columns));
}

namespace {

// First column whose sample time is >= t (columns when none).
int first_column_at(const LayoutRequest& req, std::int64_t t) {
  const double span = static_cast<double>(std::max<std::int64_t>(1, req.t1 - req.t0));
  // In doubles: t may be prof::kStillLive, whose difference with a negative t0 overflows int64.
  const double c = (static_cast<double>(t) - static_cast<double>(req.t0)) * req.columns / span - 0.5;
  int k = std::clamp(static_cast<int>(std::ceil(std::clamp(c, -1.0, static_cast<double>(req.columns)))), 0, req.columns);
  while (k > 0 && column_time(req, k - 1) >= t) --k;  // the double arithmetic may be a column off
  while (k < req.columns && column_time(req, k) < t) ++k;
  return k;
}

// One live band during the sweep.
struct Open {
  std::uint32_t alloc;
  int end;              // column it stops being live
  int since;            // column its current rectangle starts
  std::uint64_t y0;     // its current offset
};

class Sweep {
 public:
  Sweep(const prof::Allocations& a, AllocationLayout& out) : a_(a), out_(out) {}
  // Closes the rectangles of bands that end at `c` and restacks the rest when anything changed.
  void column(int c, bool added) {
    bool changed = added;
    for (std::size_t k = 0; k < live_.size();) {
      if (live_[k].end > c) { ++k; continue; }
      emit(live_[k], c);
      live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(k));
      changed = true;
    }
    if (changed) restack(c);
  }
  void add(std::uint32_t alloc, int end, int c) { live_.push_back({alloc, end, c, ~std::uint64_t{0}}); }
  std::uint64_t top() const { return top_; }
  std::size_t live_count() const { return live_.size(); }
  void finish(int columns) {
    for (const Open& o : live_) emit(o, columns);
  }

 private:
  void emit(const Open& o, int c) {
    if (o.since < c) out_.bands.push_back({o.alloc, o.since, c, o.y0, o.y0 + a_.list[o.alloc].size});
  }
  void restack(int c) {
    std::uint64_t y = 0;
    for (Open& o : live_) {
      if (o.y0 != y) {
        if (o.y0 != ~std::uint64_t{0}) emit(o, c);
        o.since = c;
        o.y0 = y;
      }
      y += a_.list[o.alloc].size;
    }
    top_ = y;
  }
  const prof::Allocations& a_;
  AllocationLayout& out_;
  std::vector<Open> live_;  // allocation order (they start in that order)
  std::uint64_t top_ = 0;
};

}  // namespace

void layout_allocations(const prof::Allocations& a, const AllocationIndex& index, const LayoutRequest& req,
                        AllocationLayout& out) {
  out.bands.clear();
  out.merged.assign(static_cast<std::size_t>(std::max(0, req.columns)), MergedColumn{});
  out.min_size = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(req.bytes_per_px)));
  std::vector<std::uint32_t>& big = out.candidates;
  index.big_overlapping(a, req.t0, req.t1, out.min_size, big);
  Sweep sweep(a, out);
  std::size_t next = 0;
  for (int c = 0; c < req.columns; ++c) {
    bool added = false;
    for (; next < big.size(); ++next) {
      const prof::Allocation& x = a.list[big[next]];
      const int start = first_column_at(req, x.alloc_ns);
      if (start > c) break;
      const int end = first_column_at(req, x.free_ns);
      if (end > c) {
        sweep.add(big[next], end, c);
        added = true;
      }
    }
    sweep.column(c, added);
    const AllocationIndex::Live live = index.live_at(a, column_time(req, c));
    MergedColumn& m = out.merged[static_cast<std::size_t>(c)];
    m.y0 = sweep.top();
    m.bytes = live.bytes - std::min(live.bytes, sweep.top());
    m.count = live.count - std::min<std::uint64_t>(live.count, sweep.live_count());
  }
  sweep.finish(req.columns);
}

int hit_band(const AllocationLayout& layout, int column, double bytes) {
  if (column < 0 || static_cast<std::size_t>(column) >= layout.merged.size() || bytes < 0) return kNoHit;
  for (std::size_t i = 0; i < layout.bands.size(); ++i) {
    const AllocationBand& b = layout.bands[i];
    if (column >= b.c0 && column < b.c1 && bytes >= static_cast<double>(b.y0) && bytes < static_cast<double>(b.y1))
      return static_cast<int>(i);
  }
  const MergedColumn& m = layout.merged[static_cast<std::size_t>(column)];
  if (m.bytes > 0 && bytes >= static_cast<double>(m.y0) && bytes < static_cast<double>(m.y0 + m.bytes)) return kMergedHit;
  return kNoHit;
}

}  // namespace memcomm::view
