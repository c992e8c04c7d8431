// Sinks receive what the recorder's collector drained: new string definitions, then events.
// They run on the collector thread only, so they need no locking of their own against the
// recorder; they must not block for long (a slow sink delays draining, and rings then drop).
// The live stream sender implements Sink with its own bounded queue (stream.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "memcomm/profiler/trace_writer.hpp"

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
// crash loses at most one flush interval. I/O errors never reach the recording threads: the sink
// stops writing, keeps the message in error() and counts what it could not write.
class FileSink : public Sink {
 public:
  FileSink(const std::string& path, const WriterOptions& options = {}, size_t chunk_events = 1 << 16);
  ~FileSink() override;
  void consume(const Batch& batch) override;
  void flush() override;
  void close() override;

  const std::string& path() const { return writer_.path(); }
  std::string error() const;
  uint64_t events_written() const;
  uint64_t events_lost() const;
  uint64_t bytes_written() const;

 private:
  void write_pending();
  mutable std::mutex mu_;  // only for the accessors above, read from other threads
  TraceWriter writer_;
  size_t chunk_events_;
  std::vector<StringDef> pending_strings_;
  std::vector<std::string> pending_text_;  // owns the text of pending_strings_
  std::vector<Event> pending_;
  std::string error_;
  uint64_t lost_ = 0;
  bool closed_ = false;
};

// "run.mct" or "run" + rank 3 -> "run.rank3.mct" (the per-rank naming every tool accepts).
std::string rank_trace_path(const std::string& base, int rank);

}  // namespace memcomm::prof
