#include "allocator_history.hpp"

#include <algorithm>

namespace memcomm::py {

void AllocatorHistory::set_capacity(std::size_t events) {
  std::lock_guard<std::mutex> lock(mu_);
  ring_.clear();
  ring_.shrink_to_fit();
  ring_.reserve(std::min<std::size_t>(events, 1u << 16));  // grows on demand beyond this
  capacity_ = events;
  next_ = 0;
  enabled_.store(events > 0, std::memory_order_relaxed);
}

void AllocatorHistory::on_event(const alloc::AllocEvent& event) noexcept {
  if (!enabled_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ == 0) return;
  if (ring_.size() < capacity_) {
    try {
      ring_.push_back(event);
    } catch (...) {  // no memory for the history: the event is not kept, the allocation goes on
    }
    return;
  }
  ring_[next_] = event;
  next_ = (next_ + 1) % capacity_;
}

std::vector<alloc::AllocEvent> AllocatorHistory::events(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<alloc::AllocEvent> out;
  const std::size_t n = ring_.size();
  const std::size_t first = n < capacity_ ? 0 : next_;  // the oldest once the ring has wrapped
  for (std::size_t i = 0; i < n; ++i) {
    const alloc::AllocEvent& e = ring_[(first + i) % n];
    if (e.device == device) out.push_back(e);
  }
  return out;
}

std::size_t AllocatorHistory::capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_;
}

}  // namespace memcomm::py
