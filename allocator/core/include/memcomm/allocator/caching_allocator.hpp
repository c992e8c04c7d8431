// memcomm's caching allocator: the engine behind every memcomm allocation (algorithm in
// Note [Caching allocator] at the top of allocator/core/caching_allocator.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "memcomm/allocator/config.hpp"
#include "memcomm/allocator/memory_source.hpp"
#include "memcomm/allocator/observer.hpp"
#include "memcomm/allocator/stats.hpp"
#include "memcomm/allocator/stream.hpp"

namespace memcomm::alloc {

// An allocation that could not be served even after freeing the cache. what() reads like
// "memcomm: out of memory allocating 2.00 GiB (requested 2147483000 bytes) on simulated device 0:
//  capacity 8.00 GiB, reserved 7.50 GiB, allocated 5.20 GiB, largest free block 1.10 GiB, fragmentation 0.31".
class OutOfMemory : public std::runtime_error {
 public:
  OutOfMemory(const std::string& what, std::uint64_t requested, std::uint64_t reserved, std::uint64_t allocated,
              std::uint64_t largest_free, double fragmentation)
      : std::runtime_error(what), requested(requested), reserved(reserved), allocated(allocated),
        largest_free(largest_free), fragmentation(fragmentation) {}
  std::uint64_t requested;   // bytes asked for
  std::uint64_t reserved;    // bytes reserved from the source when it failed
  std::uint64_t allocated;   // bytes allocated to the user when it failed
  std::uint64_t largest_free;  // largest free mapped block when it failed
  double fragmentation;      // 1 - allocated / reserved when it failed
};

// A misuse of the allocator by its caller: double free, unknown pointer, bad argument.
class AllocatorError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// One block in snapshot(); the segment's blocks tile it with no gaps.
struct BlockInfo {
  std::uint64_t address = 0;
  std::uint64_t size = 0;       // bytes after rounding
  std::uint64_t requested = 0;  // bytes asked for (allocated blocks only)
  bool allocated = false;       // handed to the user
  bool pending = false;         // freed by the user, waiting for stream events
  bool mapped = true;           // pages behind it are backed (always true outside expandable segments)
};

struct SegmentInfo {
  std::uint64_t base = 0;
  std::uint64_t size = 0;          // whole segment bytes, or the virtual range of an expandable segment
  std::uint64_t mapped_bytes = 0;  // bytes backed by the source
  StreamId stream = 0;             // stream whose pool owns the segment
  bool expandable = false;
  bool small_pool = false;
  std::vector<BlockInfo> blocks;   // in address order
};

// snapshot()'s segments as PyTorch reports them (torch.cuda.memory._snapshot(), memory_viz): each run
// of mapped blocks is a segment of its own, based at its first block and as large as its blocks, and
// unmapped blocks are left out, so that every segment's blocks tile it from its base. Used by the
// CUDA adapter's snapshot and the Python package's CPU snapshot alike.
std::vector<SegmentInfo> mapped_runs(const std::vector<SegmentInfo>& segments);

class CachingAllocator {
 public:
  // `streams` decides when a block used on several streams may be reused (record_stream); the default
  // treats all work as finished at once (host memory).
  explicit CachingAllocator(std::shared_ptr<MemorySource> source, AllocatorConfig config = {},
                            std::shared_ptr<StreamModel> streams = nullptr);
  // Gives every segment back to the source, live blocks included.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for use on `stream`, aligned to config().min_block (>= 64 bytes): from
  // the stream's own pools, else another stream's block that events proved idle, else new memory.
  // bytes == 0 returns nullptr. Throws OutOfMemory when the cap or the source leaves no room.
  void* allocate(std::size_t bytes, StreamId stream = 0);
  // Frees a block from allocate(); nullptr is ignored. Throws AllocatorError for a pointer that is
  // not a live block (double free, foreign pointer, interior pointer).
  void deallocate(void* ptr);
  // The block is also used on `stream`: its memory is reused only after that stream's work queued
  // before the free has finished. When other streams allocate too, the free also records an event on
  // the block's own stream, and once all its events have completed any stream may reuse the block
  // (Note [Cross-stream reuse] in allocator/core/stream_reuse.cpp).
  void record_stream(void* ptr, StreamId stream);
  // Size after rounding and requested size of a live block; AllocatorError for anything else.
  std::size_t block_size(const void* ptr) const;
  std::size_t requested_size(const void* ptr) const;

  // Gives back to the source every free segment and every free page it can (waiting for pending events),
  // and forgets the high waters the page budget grows from (Note [Emptying the cache forgets the high water]).
  void empty_cache();
  // Moves freed blocks whose stream events have completed into the free sets (also done on allocation),
  // and files the blocks parked by recent frees there, merged with their neighbours (Note [Recent frees]).
  void process_events();

  DeviceStats stats() const;
  MemorySummary memory_summary() const;
  void reset_peak_stats();
  std::vector<SegmentInfo> snapshot() const;
  // Checks every internal invariant (blocks tile segments, no overlap, free sets and counters agree
  // with the blocks, mapped state agrees with the source, which must serve only this allocator);
  // throws std::logic_error naming the first
  // broken one. O(blocks): for tests.
  void check_invariants() const;

  // Observers are not owned and must outlive their registration. With `with_state`, the observer is
  // first sent the events that would have built the current state (Note [An observer added mid-run]).
  void add_observer(Observer* observer, bool with_state = false);
  void remove_observer(Observer* observer);

  const AllocatorConfig& config() const;
  MemorySource& source() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace memcomm::alloc
