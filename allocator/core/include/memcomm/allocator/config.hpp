// Policy knobs of the caching allocator. Defaults are what memcomm runs with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace memcomm::alloc {

// The rounding of min_block = 0 (Note [Rounding follows the memory] in caching_allocator.cpp).
inline constexpr std::size_t kHostMinBlock = 64;     // LibTorch's CPU alignment
inline constexpr std::size_t kDeviceMinBlock = 512;  // PyTorch's CUDA allocator's kMinBlockSize

struct AllocatorConfig {
  // --- rounding and pools (Note [Pools and size classes]) ---
  // Every size is rounded up to a multiple of this (a power of 2 >= 64); 0 = the source's rounding:
  // 64 B on host memory, 512 B on a device or simulated one (Note [Rounding follows the memory]).
  std::size_t min_block = 0;
  std::size_t small_size = 1u << 20;       // requests <= this go to the small pool
  std::size_t small_segment = 2u << 20;    // whole-segment sources: small pool segment size
  std::size_t medium_segment = 20u << 20;  // whole-segment sources: segment for requests < 10 MiB
  std::size_t large_round = 2u << 20;      // whole-segment sources: larger segments round up to this
  // A free block of a whole segment's large pool is split only when the remainder is at least this;
  // small pools and expandable segments split from min_block (Note [Splitting in expandable segments]).
  // Bounds internal waste per block to below this figure.
  std::size_t min_large_split = 1u << 20;
  // Blocks at or above this are never split, and oversize requests take a cached block only if it
  // wastes less than max_oversize_waste (PyTorch's max_split_size_mb rule). Default: no oversize class.
  std::size_t max_split_size = std::numeric_limits<std::size_t>::max();
  std::size_t max_oversize_waste = 20u << 20;

  // --- expandable segments (Note [Expandable segments]) ---
  bool expandable_segments = true;         // use reserve/map when the source can; off = whole segments
  std::size_t virtual_size = 0;            // bytes reserved per expandable segment; 0 = 2 x capacity, else
                                           // 1 TiB (device sources) or 64 GiB (host memory)
  // Lazy page release (Note [Lazy page release]): mapped bytes are held to
  //   budget = peak allocated bytes x (1 + release_slack) + floor, floor = 2% of peak allocated bytes,
  //   at least a page and at most release_floor (so the floor does not dominate a small arena's ratio);
  // free pages are given back only when mapping more would cross the budget: one free block that holds
  // what is needed, the oldest such, else the largest blocks first (fewest source calls).
  // 2% is the ratio memcomm aims at (Note [Splitting the headroom] in expandable.cpp).
  double release_slack = 0.02;
  std::size_t release_floor = 4u << 20;
  // When mapping at a segment's end, map this fraction of the budget's headroom more (and at least a
  // small segment in the small pool, whole medium segments in the large pool), so growth takes few calls
  // (Note [Map ahead]); the rest of the headroom absorbs fragmentation (Note [Splitting the headroom]).
  double map_ahead = 0.125;

  // --- memory cap and garbage collection (Note [Garbage collection]) ---
  std::size_t capacity = 0;                // bytes reserved at most; 0 = the source's capacity (or none)
  // When reserved bytes exceed gc_threshold x capacity, free blocks unused for gc_min_age allocations
  // are given back, in the same order, until below the threshold. 0 disables GC.
  double gc_threshold = 0.0;
  std::uint64_t gc_min_age = 1000;         // age in allocator operations
};

}  // namespace memcomm::alloc
