// Observers: every allocator event, for profilers and tests (see Note [Observers] in caching_allocator.cpp).
#pragma once

#include <cstdint>

#include "memcomm/allocator/stream.hpp"
#include "memcomm/trace/event.hpp"

namespace memcomm::alloc {

// What happened: the trace layer's allocator actions, EventKind::Alloc .. EventKind::Oom (one
// vocabulary for the allocator, its traces, PyTorch snapshots, replay and the viewer; kind_name()
// spells them as PyTorch's snapshot trace entries do). The allocator emits only those eight.
using EventKind = prof::EventKind;

// AllocEvent::flags: the trace layer's segment flags. prof::kSegmentVirtualRange marks a
// SegmentAlloc of a virtual address range reserved for an expandable segment (its release is
// not an event: it lives as long as the allocator): no memory stands behind it
// until SegmentMap events back parts of it. Consumers count the maps, not the range, as reserved
// bytes (Note [Virtual reservations] in trace/ virtual_reservations.hpp). Without the flag they must
// guess from whether maps land in it, which a range that is never mapped (a run that stops first,
// a map that fails) defeats.

// One event; packed to 48 bytes so a profiler can copy it into a ring buffer as is.
struct AllocEvent {
  std::uint64_t time_ns;     // steady_clock (monotonic) nanoseconds
  std::uint64_t address;     // block, segment or mapped range start (0 for oom)
  std::uint64_t size;        // block size after rounding, segment size, or mapped range size
  std::uint64_t requested;   // bytes the user asked for (0 for segment events)
  StreamId stream;           // stream the block or segment belongs to
  std::int32_t device;       // source's device (-1 = host)
  EventKind kind;            // what happened
  std::uint8_t flags;        // prof::kSegmentVirtualRange, or 0
  std::uint8_t reserved[2];  // zero; room for more flags
};
static_assert(sizeof(AllocEvent) == 48, "AllocEvent is part of the trace protocol; keep it 48 bytes");

// Receives events. Called synchronously, possibly from any allocating thread and possibly while the
// allocator's lock is held: on_event must be fast, must not throw, and must not call the allocator.
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_event(const AllocEvent& event) noexcept = 0;
};

}  // namespace memcomm::alloc
