// AllocatorHistory: the last N events of the allocator engines the torch adapters create, kept for
// memcomm.dump_snapshot()'s "device_traces" (what memory_viz draws as the Active Memory Timeline).
//
// A ring of packed AllocEvents under a mutex: on_event runs on every allocating thread, possibly
// under the engine's lock, so it copies 48 bytes and returns (no allocation once the ring is full).
// Capacity 0 records nothing, and then costs one relaxed load per event.
#pragma once

#include <memcomm/allocator/observer.hpp>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

namespace memcomm::py {

class AllocatorHistory final : public alloc::Observer {
 public:
  void set_capacity(std::size_t events);
  void on_event(const alloc::AllocEvent& event) noexcept override;
  // Events of `device` (-1: the host), oldest first.
  std::vector<alloc::AllocEvent> events(int device) const;
  std::size_t capacity() const;

 private:
  std::atomic<bool> enabled_{false};  // capacity_ > 0, read without the lock: the common case is off
  mutable std::mutex mu_;
  std::vector<alloc::AllocEvent> ring_;  // grows to capacity_, then wraps at next_
  std::size_t capacity_ = 0;
  std::size_t next_ = 0;
};

}  // namespace memcomm::py
