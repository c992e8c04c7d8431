// Frees that wait for other streams (Note [Stream-ordered reuse] in stream_reuse.cpp): the pooled events
// and the queue of freed blocks still in use by queued work. The stream-ordering part of the engine,
// apart from its pools and free sets, as RMM keeps stream ordering in a class of its own.
//
// Contract: it records, queries and synchronizes events through the StreamModel and never touches a
// block's place in a pool. `defer` takes a block out of use (allocated = false, pending_events set);
// `collect` hands back each block whose events all completed; the caller clears pending_events and files
// it, one block at a time (a block still marked pending is not merged into a neighbour filed before it). The engine
// calls every method under its lock (the object is part of CachingAllocator::Impl's guarded state).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "memcomm/allocator/stream.hpp"

namespace memcomm::alloc {

struct Block;

class StreamOrderedFrees {
 public:
  explicit StreamOrderedFrees(std::shared_ptr<StreamModel> streams) : streams_(std::move(streams)) {}
  ~StreamOrderedFrees();
  StreamOrderedFrees(const StreamOrderedFrees&) = delete;
  StreamOrderedFrees& operator=(const StreamOrderedFrees&) = delete;

  // Queues freed block `b` behind one event per stream in `uses` and, when `idle_when_done`, one more
  // on its user stream `user` (so that it is idle once they complete: Note [Cross-stream reuse]).
  void defer(Block* b, const std::vector<StreamId>& uses, StreamId user, bool idle_when_done);
  // A block whose events have all completed. It keeps pending_events until the caller files it: filing
  // one block must not merge in a completed neighbour that is still on this list.
  struct Completed {
    Block* block;
    bool idle;  // the events covered its user stream: idle (Note [Cross-stream reuse])
  };
  // Takes the blocks whose events have all completed out of the queue, in queue order, and keeps the
  // rest; their events go back to the pool. The list is valid until the next call.
  const std::vector<Completed>& collect();
  // Waits for every queued event (the OOM retry, empty_cache); true when there were any.
  bool synchronize_all();
  bool empty() const { return pending_.empty(); }

 private:
  struct PendingFree {
    Block* block;                     // the block (allocated == false, still not reusable)
    std::vector<EventHandle> events;  // recorded at free time, one per stream to wait for
    bool idle_when_done = false;      // events cover its user stream too: idle once they complete
  };
  EventHandle pooled_event();
  bool completed(const PendingFree& p) const;

  std::shared_ptr<StreamModel> streams_;
  std::vector<PendingFree> pending_;      // frees waiting for events, in free order
  std::vector<EventHandle> event_pool_;   // recorded-and-completed events to reuse
  std::vector<Completed> completed_;      // what the last collect() took out
};

}  // namespace memcomm::alloc
