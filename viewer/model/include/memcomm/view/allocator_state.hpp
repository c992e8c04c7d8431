// Allocator state at a cursor: segments and their blocks, rebuilt from the allocator event stream.
//
// Note [Incremental allocator state]: the state at time t is the fold of all allocator events up
// to t. Walking all events each frame is O(events); instead AllocatorTimeline keeps checkpoints
// (full copies of the state) every `interval` events, where the interval grows with the state's
// size so checkpoints cost O(events) memory in total: kCheckpointSpacing events per segment and
// block held. A state entry (a segment or block, in the fold and in its mirror) copies to ~300 B,
// so checkpoints cost at most ~75 B per allocator event, and a seek folds at most 4 events per
// entry. With one event per entry, as before, a 1 GB torch.profiler CPU trace (1.7 M allocator
// events; each address's block in an implicit segment of its own, 5.6 k of them) paid 330 MB of
// checkpoints beside its 170 MB model; now 82 MB, for seeks of up to ~22 k events (~5 ms).
// seek(t) steps forward from the current state
// when t moves forward a little, and otherwise restarts from the nearest checkpoint at or before t,
// so a scrub costs at most one checkpoint copy plus `interval` events. Live runs append events:
// update() folds only the new ones into the last state, making checkpoints as a full build would.
//
// Segments and blocks are the trace layer's one fold, prof::AllocatorFold (Note [Allocator fold
// rules] in memcomm/trace/allocator_fold.hpp): AllocatorState::apply() hands it each event and
// mirrors every change it reports (FoldObserver) into the sorted containers that the allocator view
// draws. Its levels are the fold's. An expandable segment (PyTorch's expandable_segments, memcomm's
// expandable pools) is the fold's virtual reservation (Note [Virtual reservations] in
// memcomm/trace/virtual_reservations.hpp): `reserved` counts its mapped bytes and `virtual_reserved`
// its reservation. memcomm's traces flag the reservation (prof::kSegmentVirtualRange in
// AllocEvent::flags); for traces without the flag the builder sets that bit on a SegmentAlloc when a
// SegmentMap later lands inside it (TimelineBuilder::mark_expandable), and the fold also turns an
// unmarked segment virtual at its first map.
#pragma once

#include <memcomm/trace/allocator_fold.hpp>
#include <memcomm/trace/event.hpp>
#include <memcomm/view/chunked.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace memcomm::view {

struct AllocEvent {
  std::int64_t t;         // ns
  std::uint64_t addr;     // block or segment address
  std::uint64_t size;     // bytes
  std::uint32_t stream;   // stream the block/segment belongs to
  // What happened: one of prof::EventKind's memory kinds, Alloc .. SegmentUnmap or Oom (whose size
  // is the request). SegmentAlloc/SegmentFree are a cudaMalloc'd segment or an expandable one's
  // virtual range; SegmentMap/SegmentUnmap back or unback [addr, addr + size) of an expandable one;
  // FreeRequested leaves the block waiting on stream uses (shown as "pending free").
  prof::EventKind op;
  std::uint8_t category = 0;  // MemCategory of the block when the producer knows it (0: unknown)
  // prof::kSegmentVirtualRange on a SegmentAlloc: a virtual reservation (Note [Virtual reservations]),
  // the bit memcomm's traces carry in the segment's category byte.
  std::uint8_t flags = 0;
  std::uint8_t device = 0;    // device index (prof::kHostDevice: host memory); 0 where the source has none
};

// Block categories, numbered as prof::MemCategory (trace/ event.hpp) and snapshots agree.
inline constexpr const char* kMemCategoryNames[] = {"unknown",    "parameter", "gradient", "optimizer_state",
                                                    "activation", "temporary", "comm_buffer", "input"};
inline constexpr int kMemCategoryCount = 8;
static_assert(sizeof(AllocEvent) == 32, "AllocEvent is part of the viewer memory budget");
using AllocEvents = ChunkedArray<AllocEvent>;  // a rank's allocator events, sorted by t

enum class BlockState : std::uint8_t { Allocated, PendingFree };

struct BlockRec {
  std::uint64_t addr;  // start
  std::uint64_t size;  // bytes
  BlockState state;    // allocated, or freed by the user but not yet reusable
};

using AddrRange = prof::AddrRange;  // [begin, end)

struct SegmentRec {
  std::uint64_t addr = 0, size = 0;  // device range (expandable: the virtual reservation)
  std::uint32_t stream = 0;          // owning stream
  std::vector<BlockRec> blocks;      // sorted by addr; gaps are free (inactive) space
  bool expandable = false;           // a virtual reservation: only `mapped` is backed
  std::vector<AddrRange> mapped;     // expandable: backed ranges, sorted, disjoint, not touching
  std::uint64_t mapped_bytes = 0;    // expandable: bytes in `mapped`
  std::uint64_t backed() const { return expandable ? mapped_bytes : size; }
  // End of what is worth drawing: the whole segment, or an expandable one up to its last mapped
  // byte or block (not the rest of a 128 GiB reservation).
  std::uint64_t extent_end() const;
  // Largest free gap; in an expandable segment only mapped gaps count.
  std::uint64_t largest_free() const;
};

struct AllocatorState {
  std::vector<SegmentRec> segments;  // sorted by addr: the fold's segments, with their blocks
  prof::AllocatorFold fold;          // the state itself; `segments` and the figures below mirror it
  // The fold's figures after the last apply():
  std::uint64_t allocated = 0;       // bytes in Allocated blocks
  std::uint64_t pending_free = 0;    // bytes in PendingFree blocks
  std::uint64_t reserved = 0;        // bytes backed by device memory (virtual reservations: their maps)
  std::uint64_t virtual_reserved = 0;  // bytes of expandable segments' virtual reservations
  std::size_t block_count = 0;       // blocks over all segments
  std::uint64_t unmatched = 0;       // events that contradicted the fold (bad or mid-run traces)

  AllocatorState() = default;
  explicit AllocatorState(prof::AllocatorFold::Options o) : fold(o) {}
  void apply(const AllocEvent& e);
  std::uint64_t largest_free() const;
};

class AllocatorTimeline {
 public:
  // Events between checkpoints per segment and block the state holds (Note [Incremental allocator state]).
  static constexpr std::size_t kCheckpointSpacing = 4;
  AllocatorTimeline() = default;
  // `events` must outlive this object and stay sorted by t.
  explicit AllocatorTimeline(const AllocEvents* events, std::size_t min_interval = 4096);
  // The events from index `first_changed` on were appended (or changed): folds them in. An append
  // costs O(new events); a change before the last fold restarts from the first event.
  void update(std::size_t first_changed);

  // State after every event with time <= t.
  const AllocatorState& seek(std::int64_t t);
  // State after the first n events.
  const AllocatorState& seek_index(std::size_t n);

  std::size_t position() const { return pos_; }
  std::size_t checkpoint_count() const { return checkpoints_.size(); }
  // Events applied by the last seek: shows the rebuild is incremental.
  std::size_t last_seek_cost() const { return last_cost_; }
  std::size_t memory_bytes() const;
  // Whether the events record the allocator's segments (SegmentAlloc/SegmentMap). Without them
  // (torch.profiler [memory] events) every block sits in an implicit segment of its own size, and
  // `reserved` says nothing: the trace's reserved memory is its samples'.
  bool segments_recorded() const { return segments_recorded_; }

 private:
  struct Checkpoint {
    std::size_t index;     // events applied
    AllocatorState state;  // state after them
  };
  const AllocEvents* events_ = nullptr;
  std::size_t min_interval_ = 4096;
  std::vector<Checkpoint> checkpoints_;
  AllocatorState tail_;    // state after the first `folded_` events
  std::size_t folded_ = 0;
  std::size_t since_ = 0;  // events folded since the last checkpoint
  bool segments_recorded_ = false;
  AllocatorState cur_;
  std::size_t pos_ = 0;
  std::size_t last_cost_ = 0;
};

}  // namespace memcomm::view
