// ManualStreams: asynchronous streams modelled by counters, for tests and simulation.

#include <stdexcept>
#include <string>

#include "memcomm/allocator/stream.hpp"

namespace memcomm::alloc {

EventHandle ManualStreams::create_event() {
  std::lock_guard<std::mutex> lock(mu_);
  events_.emplace(++next_, Ticket{});
  return next_;
}

void ManualStreams::destroy_event(EventHandle event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.erase(event) == 0) throw std::invalid_argument("ManualStreams: destroy of unknown event " + std::to_string(event));
}

void ManualStreams::record_event(EventHandle event, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(event);
  if (it == events_.end()) throw std::invalid_argument("ManualStreams: record of unknown event " + std::to_string(event));
  it->second = Ticket{stream, ++queued_[stream]};
  ++records_;
}

bool ManualStreams::query_event(EventHandle event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(event);
  if (it == events_.end()) throw std::invalid_argument("ManualStreams: query of unknown event " + std::to_string(event));
  return it->second.seq == 0 || finished_[it->second.stream] >= it->second.seq;
}

void ManualStreams::synchronize_event(EventHandle event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(event);
  if (it == events_.end()) throw std::invalid_argument("ManualStreams: synchronize of unknown event " + std::to_string(event));
  std::uint64_t& done = finished_[it->second.stream];
  if (done < it->second.seq) done = it->second.seq;
}

void ManualStreams::complete(StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  finished_[stream] = queued_[stream];
}

void ManualStreams::complete_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [s, q] : queued_) finished_[s] = q;
}

std::size_t ManualStreams::live_events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

std::uint64_t ManualStreams::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

}  // namespace memcomm::alloc
