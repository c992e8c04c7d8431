// Sinks receive what the recorder's collector drained: new string definitions, then events.
// They run on the collector thread only, so they need no locking of their own against the
// recorder; they must not block for long (a slow sink delays draining, and rings then drop).
// The live stream sender implements Sink with its own bounded queue (stream.hpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memcomm/trace/trace_writer.hpp"

namespace memcomm::prof {

struct Batch {
  const StringDef* strings = nullptr;  // strings this sink has not seen yet; define before use
  size_t n_strings = 0;
  const Event* events = nullptr;       // events in per-thread order (not globally sorted)
  size_t n_events = 0;
};

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void consume(const Batch& batch) = 0;
  virtual void flush() {}   // called every RecorderOptions::flush_interval_ms and at stop()
  virtual void close() {}   // called when the sink is removed or the recorder stops for good
};

// Keeps everything in memory (tests, in-process analysis).
class MemorySink : public Sink {
 public:
  void consume(const Batch& batch) override;
  std::vector<Event> events() const;             // a copy, in arrival order
  std::vector<std::string> strings() const;      // indexed by StringId
  size_t event_count() const;
  void clear();

 private:
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::string> strings_{std::string()};
};

// Writes a .mct file: a chunk whenever `chunk_events` are buffered, and at every flush(), so a
// crash loses at most one flush interval. With compress_threads > 0, chunks are compressed by
// that many background threads and written in order by them, so the collector keeps draining
// while a chunk compresses (and several cores compress when the rate needs it); at most
// max_pending chunks wait, beyond which consume() waits (the rings then absorb, or drop and count).
// I/O errors never reach the recording threads: the sink stops writing, keeps the message in
// error() and counts what it could not write.
class FileSink : public Sink {
 public:
  FileSink(const std::string& path, const WriterOptions& options = {}, size_t chunk_events = 1 << 16,
           int compress_threads = 1, size_t max_pending = 16);
  ~FileSink() override;
  void consume(const Batch& batch) override;
  void flush() override;   // hands the partial chunk over; does not wait for the disk
  void close() override;   // writes everything, joins the threads, closes the file

  const std::string& path() const { return writer_.path(); }
  std::string error() const;
  uint64_t events_written() const;
  uint64_t events_lost() const;
  bool removed() const;  // after close(): the file was removed from its path while written (all lost)
  uint64_t bytes_written() const;

 private:
  struct Job {
    uint64_t seq;
    std::vector<std::string> text;       // owns the string definitions' text
    std::vector<StringDef> strings;
    std::vector<Event> events;
  };
  void write_pending();
  void encode_and_write(Job& job, class ChunkEncoder& enc, std::vector<char>& bytes);
  void worker();

  mutable std::mutex mu_;  // guards everything below except the collector-side pending_*
  std::condition_variable cv_jobs_, cv_space_, cv_written_;
  TraceWriter writer_;
  size_t chunk_events_;
  size_t max_pending_;
  std::vector<StringDef> pending_strings_;  // collector side
  std::vector<std::string> pending_text_;
  std::vector<Event> pending_;
  std::deque<Job> jobs_;
  std::map<uint64_t, std::pair<std::vector<char>, uint64_t>> encoded_;  // seq -> (bytes, events)
  uint64_t next_seq_ = 0, next_write_ = 0, in_flight_ = 0;
  std::vector<std::thread> workers_;
  std::unique_ptr<class ChunkEncoder> inline_enc_;  // compress_threads == 0
  std::vector<char> inline_bytes_;
  std::string error_;
  uint64_t lost_ = 0;
  bool closed_ = false, stopping_ = false;
};

// "run.mct" or "run" + rank 3 -> "run.rank3.mct" (the per-rank naming every tool accepts).
std::string rank_trace_path(const std::string& base, int rank);

}  // namespace memcomm::prof
