// Kineto's tracks (pid/tid pairs, devices and streams) as memcomm's small thread and stream
// indices, with the names the Meta events give them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "interner.hpp"
#include "raw_event.hpp"

namespace memcomm::prof::kineto {

// Host threads stop below kGpuAnnotationThreadBase; later ones share the last index.
inline constexpr uint16_t kMaxHostThreads = 0x3FFF;
// Device streams use ComputeEvent::stream (one byte); later ones share the last index.
inline constexpr int kMaxStreams = 255;

class Tracks {
 public:
  uint16_t host_thread(const TrackId& pid, const TrackId& tid);
  // The lane of a thread's python_function spans, named after the thread with " (Python)"
  // (Note [Host spans that overlap] in host_ranges.hpp).
  uint16_t python_lane(const TrackId& pid, const TrackId& tid);
  uint8_t stream(int64_t device, int64_t stream);
  // The stream index of a GPU annotation lane (named "... annotations" by emit_meta).
  uint8_t annotation_lane(int64_t device, int64_t s) {
    const uint8_t index = stream(device, s);
    annotated_[index] = true;
    return index;
  }
  void name_process(const TrackId& pid, std::string_view name) { process_names_[key(pid)] = std::string(name); }
  void name_thread(const TrackId& pid, const TrackId& tid, std::string_view name) {
    thread_names_[{key(pid), key(tid)}] = std::string(name);
  }
  // ThreadName and StreamName records, and the main process's name and pid (the process with the
  // most host events).
  void emit_meta(int64_t ts, Interner& strings, std::vector<Event>& out, std::string& process, int64_t& pid) const;
  bool overflowed() const { return overflow_; }

 private:
  using Key = std::pair<bool, std::string>;  // (is a string, number or text)
  static Key key(const TrackId& t) { return {t.is_string, t.is_string ? std::string(t.text) : std::to_string(t.number)}; }
  struct Thread {
    Key pid, tid;
    uint64_t events = 0;
    bool python = false;
  };
  uint16_t add_thread(Key pid, Key tid, bool python);
  std::map<std::pair<Key, Key>, uint16_t> thread_index_, python_index_;
  std::vector<Thread> threads_;
  std::map<std::pair<int64_t, int64_t>, uint8_t> stream_index_;
  std::vector<std::pair<int64_t, int64_t>> streams_;
  std::map<Key, std::string> process_names_;
  std::map<std::pair<Key, Key>, std::string> thread_names_;
  // The last lookups: Kineto writes long runs of events on one track.
  std::pair<int64_t, int64_t> last_numeric_{INT64_MIN, INT64_MIN};
  uint16_t last_thread_ = 0;
  bool overflow_ = false;
  bool streams_overflow_ = false;  // the last stream index holds every stream past it
  bool annotated_[kMaxStreams + 1] = {};
};

}  // namespace memcomm::prof::kineto
