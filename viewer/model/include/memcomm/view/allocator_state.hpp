// Allocator state at a cursor: segments and their blocks, rebuilt from the allocator event stream.
//
// Note [Incremental allocator state]: the state at time t is the fold of all allocator events up
// to t. Walking all events each frame is O(events); instead AllocatorTimeline keeps checkpoints
// (full copies of the state) every `interval` events, where the interval grows with the state's
// size so checkpoints cost O(events) memory in total. seek(t) steps forward from the current state
// when t moves forward a little, and otherwise restarts from the nearest checkpoint at or before t,
// so a scrub costs at most one checkpoint copy plus `interval` events.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memcomm::view {

enum class AllocOp : std::uint8_t {
  SegmentAlloc,   // cudaMalloc'd (or mapped) segment: addr, size
  SegmentFree,    // segment returned to the device
  Alloc,          // block handed to the user: addr, size
  FreeRequested,  // user freed; the block waits on stream uses (shown as "pending free")
  FreeCompleted,  // block back in the pool
  Oom,            // allocation failed: size is the request
};

struct AllocEvent {
  std::int64_t t;         // ns
  std::uint64_t addr;     // block or segment address
  std::uint64_t size;     // bytes
  std::uint32_t stream;   // stream the block/segment belongs to
  AllocOp op;             // what happened
  std::uint8_t category = 0;  // MemCategory of the block when the producer knows it (0: unknown)
  std::uint8_t pad[2] = {0, 0};
};

// Block categories, numbered as prof::MemCategory (profiler/core event.hpp) and snapshots agree.
inline constexpr const char* kMemCategoryNames[] = {"unknown",    "parameter", "gradient", "optimizer_state",
                                                    "activation", "temporary", "comm_buffer", "input"};
inline constexpr int kMemCategoryCount = 8;
static_assert(sizeof(AllocEvent) == 32, "AllocEvent is part of the viewer memory budget");

enum class BlockState : std::uint8_t { Allocated, PendingFree };

struct BlockRec {
  std::uint64_t addr;  // start
  std::uint64_t size;  // bytes
  BlockState state;    // allocated, or freed by the user but not yet reusable
};

struct SegmentRec {
  std::uint64_t addr = 0, size = 0;  // device range
  std::uint32_t stream = 0;          // owning stream
  std::vector<BlockRec> blocks;      // sorted by addr; gaps are free (inactive) space
  std::uint64_t largest_free() const;
};

struct AllocatorState {
  std::vector<SegmentRec> segments;  // sorted by addr
  std::uint64_t allocated = 0;       // bytes in Allocated blocks
  std::uint64_t pending_free = 0;    // bytes in PendingFree blocks
  std::uint64_t reserved = 0;        // bytes in segments
  std::size_t block_count = 0;       // blocks over all segments
  std::uint64_t unmatched = 0;       // events that referred to unknown blocks/segments (bad traces)

  void apply(const AllocEvent& e);
  std::uint64_t largest_free() const;
};

class AllocatorTimeline {
 public:
  AllocatorTimeline() = default;
  // `events` must outlive this object and stay sorted by t.
  explicit AllocatorTimeline(const std::vector<AllocEvent>* events, std::size_t min_interval = 4096);

  // State after every event with time <= t.
  const AllocatorState& seek(std::int64_t t);
  // State after the first n events.
  const AllocatorState& seek_index(std::size_t n);

  std::size_t position() const { return pos_; }
  std::size_t checkpoint_count() const { return checkpoints_.size(); }
  // Events applied by the last seek: shows the rebuild is incremental.
  std::size_t last_seek_cost() const { return last_cost_; }
  std::size_t memory_bytes() const;

 private:
  struct Checkpoint {
    std::size_t index;     // events applied
    AllocatorState state;  // state after them
  };
  const std::vector<AllocEvent>* events_ = nullptr;
  std::vector<Checkpoint> checkpoints_;
  AllocatorState cur_;
  std::size_t pos_ = 0;
  std::size_t last_cost_ = 0;
};

}  // namespace memcomm::view
