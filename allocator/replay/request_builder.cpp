// See request_builder.hpp and Note [Rebuilding requests].
#include "request_builder.hpp"

#include <algorithm>

namespace memcomm::replay {

RequestBuilder::RequestBuilder(int device) { out_.device = device; }

std::uint32_t RequestBuilder::new_block(std::uint64_t size) {
  auto id = static_cast<std::uint32_t>(block_size_.size());
  block_size_.push_back(size);
  return id;
}

void RequestBuilder::alloc(std::uint64_t addr, std::uint64_t size, std::int64_t stream) {
  ++out_.trace_events;
  touched_.insert(addr);
  auto it = live_.find(addr);
  if (it != live_.end()) {  // the trace lost a free: end the old block first
    ++out_.anomalies;
    traced_.push_back(Request{0, stream, it->second, Request::Op::free});
    live_.erase(it);
  }
  std::uint32_t id = new_block(size);
  live_.emplace(addr, id);
  traced_.push_back(Request{size, stream, id, Request::Op::alloc});
}

void RequestBuilder::free_completed(std::uint64_t addr, std::uint64_t size, std::int64_t stream) {
  ++out_.trace_events;
  touched_.insert(addr);
  auto it = live_.find(addr);
  std::uint32_t id;
  if (it != live_.end()) {
    id = it->second;
    live_.erase(it);
  } else if (ended_.count(addr)) {  // freed twice with no alloc between: a damaged trace
    ++out_.anomalies;
    return;
  } else {  // allocated before the trace started
    id = new_block(size);
    pre_.push_back(Preexisting{addr, size, stream, id});
  }
  ended_.insert(addr);
  traced_.push_back(Request{0, stream, id, Request::Op::free});
}

void RequestBuilder::free_requested(std::uint64_t addr) {
  ++out_.trace_events;
  touched_.insert(addr);
}

void RequestBuilder::segment_grow(std::uint64_t bytes, bool mapped) {
  ++out_.trace_events;
  ++out_.recorded.source_allocs;
  out_.recorded.expandable |= mapped;
  reserved_steps_.push_back(static_cast<std::int64_t>(bytes));
}

void RequestBuilder::segment_shrink(std::uint64_t bytes, bool mapped) {
  ++out_.trace_events;
  ++out_.recorded.source_frees;
  out_.recorded.expandable |= mapped;
  reserved_steps_.push_back(-static_cast<std::int64_t>(bytes));
}

void RequestBuilder::oom() {
  ++out_.trace_events;
  ++out_.trace_ooms;
}

void RequestBuilder::step() {
  ++out_.trace_events;
  traced_.push_back(Request{0, 0, 0, Request::Op::step});
}

void RequestBuilder::other() { ++out_.trace_events; }

void RequestBuilder::anomaly() {
  ++out_.trace_events;
  ++out_.anomalies;
}

void RequestBuilder::end_block(std::uint64_t addr, std::uint64_t requested, std::int64_t stream) {
  if (touched_.count(addr)) {
    if (!live_.count(addr)) ++out_.anomalies;  // the trace freed it, yet it is live at the end
    return;
  }
  pre_.push_back(Preexisting{addr, requested, stream, new_block(requested)});
}

void RequestBuilder::end_reserved(std::uint64_t bytes, bool expandable) {
  has_end_state_ = true;
  end_reserved_ += bytes;
  out_.recorded.expandable |= expandable;
}

DeviceRequests RequestBuilder::finish() {
  std::sort(pre_.begin(), pre_.end(), [](const Preexisting& a, const Preexisting& b) { return a.addr < b.addr; });
  out_.requests.reserve(pre_.size() + traced_.size());
  for (const auto& p : pre_) {
    out_.requests.push_back(Request{p.size, p.stream, p.block, Request::Op::alloc});
    out_.preexisting_bytes += p.size;
  }
  out_.preexisting_blocks = pre_.size();
  out_.requests.insert(out_.requests.end(), traced_.begin(), traced_.end());
  out_.block_count = static_cast<std::uint32_t>(block_size_.size());

  std::uint64_t cur = 0;
  for (const Request& r : out_.requests) {
    if (r.op == Request::Op::alloc) {
      cur += r.size;
      out_.peak_live = std::max(out_.peak_live, cur);
    } else if (r.op == Request::Op::free) {
      cur -= block_size_[r.block];
    }
  }

  // What PyTorch reserved: start = end state minus the trace's net change (0 without an end state,
  // as for our own traces, which start with the process), then replay the segment events.
  RecordedReserved& rec = out_.recorded;
  rec.known = has_end_state_ || !reserved_steps_.empty();
  rec.at_end = end_reserved_;
  std::int64_t net = 0;
  for (std::int64_t d : reserved_steps_) net += d;
  std::int64_t start = has_end_state_ ? static_cast<std::int64_t>(end_reserved_) - net : 0;
  if (start < 0) {  // segment events that the end state cannot explain
    ++out_.anomalies;
    start = 0;
  }
  rec.at_start = static_cast<std::uint64_t>(start);
  std::int64_t r = start, peak = start;
  for (std::int64_t d : reserved_steps_) {
    r += d;
    peak = std::max(peak, r);
  }
  rec.peak = static_cast<std::uint64_t>(peak);
  if (!has_end_state_) rec.at_end = static_cast<std::uint64_t>(std::max<std::int64_t>(r, 0));
  return std::move(out_);
}

}  // namespace memcomm::replay
