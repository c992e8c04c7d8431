// See stream_frees.hpp and Note [Stream-ordered reuse] in stream_reuse.cpp.
#include "stream_frees.hpp"

#include "allocator_impl.hpp"

namespace memcomm::alloc {

StreamOrderedFrees::~StreamOrderedFrees() {
  for (EventHandle e : event_pool_) streams_->destroy_event(e);
  for (PendingFree& p : pending_)
    for (EventHandle e : p.events) streams_->destroy_event(e);
}

EventHandle StreamOrderedFrees::pooled_event() {
  if (event_pool_.empty()) return streams_->create_event();
  const EventHandle e = event_pool_.back();
  event_pool_.pop_back();
  return e;
}

void StreamOrderedFrees::defer(Block* b, const std::vector<StreamId>& uses, StreamId user, bool idle_when_done) {
  PendingFree p{b, {}, idle_when_done};
  for (StreamId s : uses) {
    const EventHandle e = pooled_event();
    streams_->record_event(e, s);
    p.events.push_back(e);
  }
  if (idle_when_done) {  // record_stream never lists the user stream among the uses
    const EventHandle e = pooled_event();
    streams_->record_event(e, user);
    p.events.push_back(e);
  }
  b->allocated = false;
  b->pending_events = int(p.events.size());
  pending_.push_back(std::move(p));
}

bool StreamOrderedFrees::completed(const PendingFree& p) const {
  for (EventHandle e : p.events)
    if (!streams_->query_event(e)) return false;
  return true;
}

const std::vector<StreamOrderedFrees::Completed>& StreamOrderedFrees::collect() {
  completed_.clear();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    PendingFree& p = pending_[i];
    if (!completed(p)) {
      if (kept != i) pending_[kept] = std::move(p);
      ++kept;
      continue;
    }
    event_pool_.insert(event_pool_.end(), p.events.begin(), p.events.end());
    completed_.push_back({p.block, p.idle_when_done});
  }
  pending_.resize(kept);
  return completed_;
}

bool StreamOrderedFrees::synchronize_all() {
  for (PendingFree& p : pending_)
    for (EventHandle e : p.events) streams_->synchronize_event(e);
  return !pending_.empty();
}

}  // namespace memcomm::alloc
