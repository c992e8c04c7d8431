// A single-producer / single-consumer ring of events: the per-thread buffer of the recorder.
//
// Note [Ring protocol]
// The producer (the recording thread) owns `head`; the consumer (the collector) owns `tail`.
// Both only grow; slot = index & mask. The producer keeps a stale copy of `tail` and re-reads the
// real one only when the ring looks full, so a push is one compare, one 24-byte store and one
// release store in the common case. A full ring never waits: the event is dropped and `dropped`
// (written by the producer only) counts it; the collector turns count increases into DropEvents.
// (try_push leaves the choice to its caller: Note [What a full ring keeps] in recorder.hpp.)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "memcomm/trace/event.hpp"

namespace memcomm::prof {

class SpscRing {
 public:
  // `capacity` is rounded up to a power of two (at least 2).
  explicit SpscRing(size_t capacity) {
    size_t cap = 2;
    while (cap < capacity) cap <<= 1;
    mask_ = cap - 1;
    slots_.reset(new Event[cap]);
  }

  size_t capacity() const { return mask_ + 1; }

  // Producer side. Never blocks, never allocates. False (and counted) when full.
  template <class View>
  bool push(const View& e) noexcept {
    if (try_push(e)) return true;
    count_drop();
    return false;
  }
  // Producer side: push() that counts nothing when the ring is full.
  // Takes any 24-byte record view; it is copied as three 8-byte words (Note [Word copies]).
  template <class View>
  bool try_push(const View& e) noexcept {
    static_assert(sizeof(View) == sizeof(Event) && std::is_trivially_copyable_v<View>);
    const uint64_t h = head_.load(std::memory_order_relaxed);
    if (h - cached_tail_ > mask_) {
      cached_tail_ = tail_.load(std::memory_order_acquire);
      if (h - cached_tail_ > mask_) return false;
    }
    // Note [Word copies]: a record built field by field on the stack and then moved with 16-byte
    // loads stalls on store forwarding (~10 cycles); three 8-byte moves forward cleanly.
    const auto* src = reinterpret_cast<const unsigned char*>(&e);
    auto* dst = reinterpret_cast<unsigned char*>(&slots_[h & mask_]);
    uint64_t w0, w1, w2;
    std::memcpy(&w0, src, 8);
    std::memcpy(&w1, src + 8, 8);
    std::memcpy(&w2, src + 16, 8);
    std::memcpy(dst, &w0, 8);
    std::memcpy(dst + 8, &w1, 8);
    std::memcpy(dst + 16, &w2, 8);
    head_.store(h + 1, std::memory_order_release);
    return true;
  }

  // Consumer side: copies out everything published so far (at most max), returns the count.
  template <class Out>
  size_t drain(Out&& out, size_t max = ~size_t(0)) {
    const uint64_t t = tail_.load(std::memory_order_relaxed);
    uint64_t h = head_.load(std::memory_order_acquire);
    if (h - t > max) h = t + max;
    for (uint64_t i = t; i < h; ++i) out(slots_[i & mask_]);
    tail_.store(h, std::memory_order_release);
    return size_t(h - t);
  }
  // Consumer side: discards everything published so far.
  void discard() { tail_.store(head_.load(std::memory_order_acquire), std::memory_order_release); }

  // Producer side: one event lost.
  void count_drop() noexcept { dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  size_t size() const {
    return size_t(head_.load(std::memory_order_acquire) - tail_.load(std::memory_order_acquire));
  }

 private:
  // Producer-owned line.
  alignas(64) std::atomic<uint64_t> head_{0};
  uint64_t cached_tail_ = 0;
  std::atomic<uint64_t> dropped_{0};
  // Consumer-owned line.
  alignas(64) std::atomic<uint64_t> tail_{0};
  // Shared, read-only after construction.
  alignas(64) uint64_t mask_ = 0;
  std::unique_ptr<Event[]> slots_;
};

}  // namespace memcomm::prof
