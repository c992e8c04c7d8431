// The allocation timeline's geometry for one view (issue 18): memory_viz's Active Memory Timeline
// (torch/cuda/_memory_viz.py's trace plot) with a level of detail, in columns and bytes, no UI.
//
// Note [Allocation bands]: at each time the live allocations are stacked bottom-up in allocation
// order, so a band drops when one below it is freed, as in memory_viz. The view samples one time
// per pixel column (its centre). Level of detail: an allocation smaller than one pixel's worth of
// bytes (`min_size`) is not drawn alone; per column, all such live allocations are merged into one
// band stacked on top of the big ones ("N allocations under one pixel"). The big ones live at any
// time sum to at most the peak, so at most (plot height) of them are stacked in a column, and a
// band is cut into a new rectangle only when its offset changes (a big one below it is freed):
// the work per frame is O(columns * log n + visible big allocations), not O(allocations).
#pragma once

#include <memcomm/trace/allocations.hpp>
#include <memcomm/view/allocation_index.hpp>

#include <cstdint>
#include <vector>

namespace memcomm::view {

struct AllocationBand {
  std::uint32_t alloc;          // index in Allocations::list
  int c0, c1;                   // columns [c0, c1)
  std::uint64_t y0, y1;         // bytes from the bottom [y0, y1)
};
struct MergedColumn {
  std::uint64_t y0 = 0;         // top of the big bands in this column
  std::uint64_t bytes = 0;      // live bytes of the allocations under one pixel
  std::uint64_t count = 0;
};
struct AllocationLayout {
  std::vector<AllocationBand> bands;
  std::vector<MergedColumn> merged;  // per column
  std::uint64_t min_size = 1;        // allocations of at least this many bytes are bands
  std::vector<std::uint32_t> candidates;  // scratch: the index's big allocations in the range
};

struct LayoutRequest {
  std::int64_t t0 = 0, t1 = 1;       // visible time range
  int columns = 1;
  double bytes_per_px = 1;           // the y scale: allocations under this are merged
};
// Note [Allocation bands]. `out`'s vectors are reused across calls.
void layout_allocations(const prof::Allocations& a, const AllocationIndex& index, const LayoutRequest& req,
                        AllocationLayout& out);
// The column's sample time (its centre).
std::int64_t column_time(const LayoutRequest& req, int column);

// What is under (column, bytes): the band's index in layout.bands, kMergedHit for the merged
// band, or kNoHit.
inline constexpr int kNoHit = -1;
inline constexpr int kMergedHit = -2;
int hit_band(const AllocationLayout& layout, int column, double bytes);

}  // namespace memcomm::view
