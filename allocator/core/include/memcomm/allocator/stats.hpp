// Allocator statistics, with the names and meanings of PyTorch's c10::CachingDeviceAllocator::DeviceStats.
#pragma once

#include <cstdint>

namespace memcomm::alloc {

// One quantity over time, as PyTorch's Stat: its value now, its peak, and the totals added and removed.
struct Stat {
  std::int64_t current = 0;    // value now
  std::int64_t peak = 0;       // largest value since construction or reset_peak_stats()
  std::int64_t allocated = 0;  // total ever added ("total" in the issue)
  std::int64_t freed = 0;      // total ever removed

  void increase(std::int64_t amount) {
    current += amount;
    allocated += amount;
    if (current > peak) peak = current;
  }
  void decrease(std::int64_t amount) {
    current -= amount;
    freed += amount;
  }
  void reset_peak() { peak = current; }
};

struct DeviceStats {
  // Counts.
  Stat allocation;              // blocks handed out and not yet freed
  Stat segment;                 // segments (expandable segments count once, when reserved)
  Stat active;                  // allocated blocks plus freed blocks still waiting for stream events
  Stat inactive_split;          // free blocks that are pieces of a split segment (unusable as a whole)
  // Bytes.
  Stat allocated_bytes;         // sum of allocated block sizes (after rounding)
  Stat reserved_bytes;          // bytes backed by the source (whole segments + mapped pages)
  Stat active_bytes;            // bytes of active blocks
  Stat inactive_split_bytes;    // bytes of inactive split blocks
  Stat requested_bytes;         // bytes the user asked for, of allocated blocks
  // Events.
  std::int64_t num_alloc_retries = 0;     // allocations that freed the cache and tried again
  std::int64_t num_ooms = 0;              // allocations that failed with OutOfMemory
  std::int64_t num_cross_class_allocs = 0;  // served from the other size class's pool instead of an OOM
                                            // (Note [Last resort: the other size class], growth.cpp), or
                                            // a small request lent a large hole in a trough (Note [A small
                                            // request in a trough borrows a large hole], expandable.cpp)
  std::int64_t num_sync_all_streams = 0;  // times the allocator waited for every pending event
  std::int64_t num_stream_syncs = 0;      // times growth waited for one other stream to lend its free
                                          // blocks (Note [Lending before giving pages back], stream_reuse.cpp)
  std::int64_t num_device_alloc = 0;      // source allocate() calls
  std::int64_t num_device_free = 0;       // source deallocate() calls
  std::int64_t num_device_map = 0;        // source map() calls (each maps one contiguous run)
  std::int64_t num_device_unmap = 0;      // source unmap() calls
  std::int64_t num_gc_releases = 0;       // blocks whose pages garbage collection gave back
  // Oversize (blocks at or above AllocatorConfig::max_split_size).
  Stat oversize_allocations;
  Stat oversize_segments;

  // Source calls that acquire memory, the figure compared against PyTorch's cudaMalloc count.
  std::int64_t source_calls() const { return num_device_alloc + num_device_map; }
  // F = 1 - peak allocated / peak reserved (0 when nothing was reserved).
  double fragmentation() const {
    return reserved_bytes.peak > 0 ? 1.0 - double(allocated_bytes.peak) / double(reserved_bytes.peak) : 0.0;
  }
};

// Derived figures that need the free sets, computed under the lock by CachingAllocator::memory_summary().
struct MemorySummary {
  std::uint64_t free_bytes = 0;           // reserved bytes not allocated (mapped free blocks)
  std::uint64_t largest_free_block = 0;   // largest mapped free block
  std::uint64_t internal_waste = 0;       // allocated - requested bytes of live blocks
  std::uint64_t pending_free_bytes = 0;   // freed blocks waiting for stream events
  std::uint64_t segments = 0;             // segments (expandable or whole)
  std::uint64_t blocks = 0;               // blocks of all kinds, free and allocated
  // External fragmentation = 1 - largest free block / total free (0 when nothing is free).
  double external_fragmentation() const {
    return free_bytes > 0 ? 1.0 - double(largest_free_block) / double(free_bytes) : 0.0;
  }
};

}  // namespace memcomm::alloc
