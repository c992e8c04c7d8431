#include "tracks.hpp"

#include <fmt/format.h>

#include "memcomm/trace/kineto.hpp"

namespace memcomm::prof::kineto {

uint16_t Tracks::host_thread(const TrackId& pid, const TrackId& tid) {
  const bool numeric = !pid.is_string && !tid.is_string;
  if (numeric && last_numeric_ == std::make_pair(pid.number, tid.number)) {
    ++threads_[last_thread_].events;
    return last_thread_;
  }
  Key p = key(pid), t = key(tid);
  auto it = thread_index_.find({p, t});
  const uint16_t index = it != thread_index_.end() ? it->second : add_thread(std::move(p), std::move(t), false);
  ++threads_[index].events;
  if (numeric) {
    last_numeric_ = {pid.number, tid.number};
    last_thread_ = index;
  }
  return index;
}

uint16_t Tracks::python_lane(const TrackId& pid, const TrackId& tid) {
  Key p = key(pid), t = key(tid);
  auto it = python_index_.find({p, t});
  const uint16_t index = it != python_index_.end() ? it->second : add_thread(std::move(p), std::move(t), true);
  return uint16_t(kPythonFrameThreadBase | index);
}

uint16_t Tracks::add_thread(Key pid, Key tid, bool python) {
  if (threads_.size() >= kMaxHostThreads) {
    overflow_ = true;
    return uint16_t(kMaxHostThreads - 1);
  }
  const auto index = uint16_t(threads_.size());
  threads_.push_back({pid, tid, 0, python});
  (python ? python_index_ : thread_index_).emplace(std::make_pair(std::move(pid), std::move(tid)), index);
  return index;
}

uint8_t Tracks::stream(int64_t device, int64_t stream) {
  auto it = stream_index_.find({device, stream});
  if (it != stream_index_.end()) return it->second;
  if (streams_.size() >= size_t(kMaxStreams)) {
    overflow_ = streams_overflow_ = true;
    return uint8_t(kMaxStreams - 1);
  }
  const auto index = uint8_t(streams_.size());
  streams_.emplace_back(device, stream);
  stream_index_.emplace(std::make_pair(device, stream), index);
  return index;
}

void Tracks::emit_meta(int64_t ts, Interner& strings, std::vector<Event>& out, std::string& process,
                       int64_t& pid) const {
  std::map<Key, uint64_t> per_process;
  for (size_t i = 0; i < threads_.size(); ++i) {
    const Thread& th = threads_[i];
    per_process[th.pid] += th.events;
    auto named = thread_names_.find({th.pid, th.tid});
    std::string name = named != thread_names_.end() ? named->second : fmt::format("thread {}", th.tid.second);
    if (th.python) name += " (Python)";
    const auto thread = uint16_t(th.python ? kPythonFrameThreadBase | i : i);
    out.push_back(Event::from(make_meta(ts, MetaKey::ThreadName, 0, strings.intern(name), thread)));
  }
  for (size_t i = 0; i < streams_.size(); ++i) {
    std::string name = fmt::format("GPU {} stream {}", streams_[i].first, streams_[i].second);
    if (streams_overflow_ && i + 1 == size_t(kMaxStreams)) name += " and the streams after it";
    out.push_back(Event::from(make_meta(ts, MetaKey::StreamName, 0, strings.intern(name), uint16_t(i))));
    if (annotated_[i])
      out.push_back(Event::from(make_meta(ts, MetaKey::ThreadName, 0, strings.intern(name + " annotations"),
                                          uint16_t(kGpuAnnotationThreadBase | i))));
  }
  const Key* main = nullptr;
  uint64_t most = 0;
  for (const auto& [p, n] : per_process)
    if (n > most && !p.first) {
      most = n;
      main = &p;
    }
  if (!main) return;
  pid = std::strtoll(main->second.c_str(), nullptr, 10);
  auto named = process_names_.find(*main);
  if (named != process_names_.end()) process = named->second;
}

}  // namespace memcomm::prof::kineto
