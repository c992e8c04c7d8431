// AllocatorTimeline: allocator states at a cursor, from checkpoints (Note [Incremental allocator
// state] in allocator_state.hpp).
#include <memcomm/view/allocator_state.hpp>

#include <algorithm>

namespace memcomm::view {

AllocatorTimeline::AllocatorTimeline(const AllocEvents* events, std::size_t min_interval)
    : events_(events), min_interval_(min_interval) {
  update(0);
  checkpoints_.shrink_to_fit();
}

void AllocatorTimeline::update(std::size_t first_changed) {
  if (events_ == nullptr) return;
  if (first_changed < folded_ || checkpoints_.empty()) {  // history changed: fold again from the start
    checkpoints_.clear();
    checkpoints_.push_back({0, AllocatorState{}});
    tail_ = AllocatorState{};
    folded_ = since_ = 0;
    segments_recorded_ = false;
  }
  if (pos_ > first_changed) {  // the cursor state includes changed events
    cur_ = AllocatorState{};
    pos_ = 0;
  }
  // See Note [Incremental allocator state]: one pass, copying the state at growing intervals.
  for (; folded_ < events_->size(); ++folded_) {
    const AllocEvent& e = (*events_)[folded_];
    segments_recorded_ = segments_recorded_ || e.op == prof::EventKind::SegmentAlloc || e.op == prof::EventKind::SegmentMap;
    tail_.apply(e);
    if (++since_ >= std::max(min_interval_, kCheckpointSpacing * (tail_.block_count + tail_.segments.size()))) {
      checkpoints_.push_back({folded_ + 1, tail_});
      since_ = 0;
    }
  }
}

const AllocatorState& AllocatorTimeline::seek(std::int64_t t) {
  if (events_ == nullptr) return cur_;
  const std::size_t n = lower_bound_index(*events_, t, [](const AllocEvent& e, std::int64_t v) { return e.t <= v; });  // upper bound
  return seek_index(n);
}

const AllocatorState& AllocatorTimeline::seek_index(std::size_t n) {
  last_cost_ = 0;
  if (events_ == nullptr) return cur_;
  n = std::min(n, folded_);
  if (n == pos_) return cur_;
  // The checkpoint at or before n; restart from it unless stepping forward from here is shorter.
  auto cp = std::upper_bound(checkpoints_.begin(), checkpoints_.end(), n,
                             [](std::size_t v, const Checkpoint& c) { return v < c.index; });
  --cp;
  if (n < pos_ || cp->index > pos_) {
    cur_ = cp->state;
    pos_ = cp->index;
  }
  for (; pos_ < n; ++pos_, ++last_cost_) cur_.apply((*events_)[pos_]);
  return cur_;
}

std::size_t AllocatorTimeline::memory_bytes() const {
  std::size_t b = sizeof(*this);
  for (const auto& c : checkpoints_) {
    b += sizeof(c) + c.state.segments.capacity() * sizeof(SegmentRec);
    for (const auto& s : c.state.segments) b += s.blocks.capacity() * sizeof(BlockRec) + s.mapped.capacity() * sizeof(AddrRange);
    b += c.state.fold.memory_bytes();
  }
  return b;
}

}  // namespace memcomm::view
