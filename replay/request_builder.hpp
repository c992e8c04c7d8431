// Builds one device's request sequence event by event (Note [Rebuilding requests] in requests.hpp).
// Private to memcomm_replay: the PyTorch snapshot reader and the .mct reader both feed it. The
// blocks are the trace layer's fold (prof::AllocatorFold, Note [Allocator fold rules]): its block
// ids are the requests' ids, the blocks it starts and ends are the requests, and its verdict on a
// free tells a block allocated before the trace from one freed twice.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "memcomm/replay/requests.hpp"
#include "memcomm/trace/allocator_fold.hpp"

namespace memcomm::replay {

// Note [Live bytes past 4 EiB]: sizes in a trace are the file's word; no allocator holds 2^62 bytes
// (memcomm's sizes stop there, bytes.hpp), and live sums past 2^64 wrapped round: a crafted profile
// of three blocks near 2^63 bytes broke a policy's invariant (an internal error, exit 1) where it is
// an input error. A device whose live bytes pass 2^62 at any point is refused; load_trace() names the
// file.
struct LiveBytesTooLarge : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class RequestBuilder final : private prof::FoldObserver {
 public:
  // `rank`: the trace's rank (kNoRank when the format has none); `device`: the device index.
  RequestBuilder(int rank, int device);

  // The trace, in order. Every call counts as one trace event.
  void alloc(std::uint64_t addr, std::uint64_t size, std::int64_t stream);
  void free_completed(std::uint64_t addr, std::uint64_t size, std::int64_t stream);
  void free_requested(std::uint64_t addr);
  // Segment events; `addr` is the segment's (or mapped range's) start, kNoAddr when the trace has none.
  // An expandable segment's virtual reservation counts for nothing; its maps count (Note [Reserved
  // bytes of expandable segments] in request_builder.cpp). `virtual_range`: the trace flags this
  // segment_alloc/segment_free as such a reservation (otherwise it is guessed).
  static constexpr std::uint64_t kNoAddr = ~std::uint64_t{0};
  void segment_grow(std::uint64_t addr, std::uint64_t bytes, bool mapped,  // segment_alloc / segment_map
                    bool virtual_range = false);
  void segment_shrink(std::uint64_t addr, std::uint64_t bytes, bool mapped,  // segment_free / segment_unmap
                      bool virtual_range = false);
  void oom();
  void other();    // markers and unknown actions: counted, nothing else
  void anomaly();  // an event that cannot be used (e.g. an alloc without addr): counted as both

  // End state (snapshots only), after the trace: a block live at the end. If no alloc/free event
  // named its address it predates the trace; if one did, it must still be live.
  void end_block(std::uint64_t addr, std::uint64_t requested, std::int64_t stream);
  void end_reserved(std::uint64_t bytes, bool expandable);
  // A trace that records the allocator's total instead of an end state (a torch.profiler memory
  // profile): `live_before` bytes were live before its first event. What its frees of pre-trace
  // blocks do not account for stayed live throughout, in blocks no event names: it becomes one
  // pre-trace block, never freed. Call after the trace's events. Returns that block's bytes (0: none).
  std::uint64_t untraced_live(std::uint64_t live_before);

  // Pre-trace blocks first (address order), then the trace; peaks and recorded figures. Throws
  // LiveBytesTooLarge when the live bytes pass 2^62 (Note [Live bytes past 4 EiB]).
  DeviceRequests finish();

 private:
  struct Preexisting {
    std::uint64_t addr;
    std::uint64_t size;
    std::int64_t stream;
    std::uint32_t block;
  };
  // A block the events never allocated (it predates the trace): a fresh id, its request first.
  void preexisting(std::uint64_t addr, std::uint64_t size, std::int64_t stream);
  void fold_segment(prof::EventKind kind, std::uint64_t addr, std::uint64_t bytes, bool virtual_range);
  // FoldObserver: the fold's blocks become the requests.
  void block_added(std::uint64_t addr, const prof::FoldBlock& b) override;
  void block_removed(std::uint64_t addr, const prof::FoldBlock& b) override;

  DeviceRequests out_;
  // Every address an alloc/free names is remembered (keep_freed); replay completes every free.
  prof::AllocatorFold fold_{prof::AllocatorFold::Options{true, true}};
  std::int64_t stream_ = 0;                                // the stream of the event being folded
  std::vector<Preexisting> pre_;
  std::vector<Request> traced_;
  std::vector<std::uint64_t> block_size_;                  // requested bytes per block id
  struct SegmentStep {
    std::uint64_t addr;   // segment start (alloc/free) or mapped range start (map/unmap); kNoAddr if unknown
    std::uint64_t bytes;  // its size
    bool grow;            // segment_alloc / segment_map
    bool mapped;          // segment_map / segment_unmap
    bool flagged_virtual; // the trace marks it a virtual reservation (memcomm's .mct)
  };
  std::vector<SegmentStep> segment_steps_;                 // segment events, in trace order
  // Per segment step: a virtual reservation or its release (Note [Reserved bytes of expandable segments]).
  static std::vector<bool> virtual_reservations(const std::vector<SegmentStep>& steps);
  std::uint64_t end_reserved_ = 0;
  bool has_end_state_ = false;
};

}  // namespace memcomm::replay
