// Streams and events as the allocator sees them (see Note [Stream-ordered reuse] in stream_reuse.cpp).
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace memcomm::alloc {

// A stream is an opaque id: a cudaStream_t cast to an integer on CUDA, any number elsewhere.
// Stream 0 is the default stream.
using StreamId = std::uint64_t;
// An event is an opaque handle created by a StreamModel.
using EventHandle = std::uint64_t;

// What the allocator needs from a stream system to reuse memory safely across streams: events that
// are recorded on a stream and later queried. The allocator pools events (create_event is called
// only when its pool is empty). It calls these with its lock held, as PyTorch does with cudaEventQuery:
// they must be quick and must not call back into the allocator.
class StreamModel {
 public:
  virtual ~StreamModel() = default;
  virtual EventHandle create_event() = 0;
  virtual void destroy_event(EventHandle event) = 0;
  // Marks the point in `stream`'s work queue that the event completes at.
  virtual void record_event(EventHandle event, StreamId stream) = 0;
  // True once all work queued on the stream before record_event has finished.
  virtual bool query_event(EventHandle event) = 0;
  // Waits until query_event would return true.
  virtual void synchronize_event(EventHandle event) = 0;
};

// Host memory: work is synchronous, so every event is complete as soon as it is recorded.
class ImmediateStreams final : public StreamModel {
 public:
  EventHandle create_event() override { return ++next_; }
  void destroy_event(EventHandle) override {}
  void record_event(EventHandle, StreamId) override {}
  bool query_event(EventHandle) override { return true; }
  void synchronize_event(EventHandle) override {}

 private:
  EventHandle next_ = 0;  // handles are only counted; nothing is stored per event
};

// A model of asynchronous streams for tests and simulation: work is queued on a stream by
// record_event and finishes only when the owner calls complete(stream) or complete_all().
// synchronize_event() finishes the stream's work up to the event, as a real wait would.
class ManualStreams final : public StreamModel {
 public:
  EventHandle create_event() override;
  void destroy_event(EventHandle event) override;
  void record_event(EventHandle event, StreamId stream) override;
  bool query_event(EventHandle event) override;
  void synchronize_event(EventHandle event) override;

  // Finishes all work queued on `stream` so far.
  void complete(StreamId stream);
  void complete_all();
  // Events created and not destroyed (the allocator's pool keeps them alive).
  std::size_t live_events() const;
  std::uint64_t records() const;  // record_event calls so far

 private:
  struct Ticket {
    StreamId stream = 0;     // stream the event was last recorded on
    std::uint64_t seq = 0;   // position in that stream's queue; 0 = never recorded (complete)
  };
  mutable std::mutex mu_;                                   // guards everything below
  EventHandle next_ = 0;                                    // last handle given out
  std::unordered_map<EventHandle, Ticket> events_;          // live events
  std::unordered_map<StreamId, std::uint64_t> queued_;      // work items queued per stream
  std::unordered_map<StreamId, std::uint64_t> finished_;    // work items finished per stream
  std::uint64_t records_ = 0;                               // record_event calls
};

}  // namespace memcomm::alloc
