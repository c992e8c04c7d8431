// TraceReader: the fast, validating reader of .mct files that every tool uses.
//
//   TraceReader r("run.rank0.mct");
//   ChunkView c;
//   while (r.next(c))
//     for (const Event& e : c) ...            // r.string(id) resolves names
//   r.recovery();                             // what was read, and whether the tail was cut off
//
// Files of an earlier event-model version are read as the current one (kFirstEventModelVersion).
// Errors (TraceError, message names file, chunk index and byte offset): bad magic, unsupported
// format or event-model version, corrupt header checksum, bad chunk magic/lengths, chunk checksum
// mismatch, decompression failure. A chunk whose declared payload runs past the end of the file is
// not an error: it is what a killed writer leaves (Note [Crash safety]); next() returns false and
// recovery() reports the truncation. Neither is a last chunk that zeros end the file inside of, or
// zeros after the last chunk (Note [A tail of zeros]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memcomm/trace/trace_error.hpp"
#include "memcomm/trace/trace_format.hpp"

namespace memcomm::prof {

struct ChunkView {
  uint32_t rank = kUnknownRank;  // rank of these events
  const Event* events = nullptr; // valid until the next call to next()
  size_t count = 0;
  uint64_t file_offset = 0;      // where the chunk header starts
  uint64_t index = 0;            // chunk number, from 0
  const Event* begin() const { return events; }
  const Event* end() const { return events + count; }
};

struct RecoveryInfo {
  uint64_t file_bytes = 0;       // size of the file (or buffer)
  uint64_t bytes_used = 0;       // header + complete chunks read so far
  uint64_t chunks = 0;           // complete chunks read
  uint64_t events = 0;           // events in them
  bool truncated = false;        // the file ends inside a chunk (killed writer)
  uint64_t truncated_bytes = 0;  // bytes of that partial chunk, ignored
  std::string detail;            // human-readable note about the truncation, empty otherwise
};

class TraceReader {
 public:
  // Opens and memory-maps `path`; validates the file header. Throws TraceError.
  explicit TraceReader(const std::string& path);
  // Reads from a caller-owned buffer (fuzzing, live data); `name` is used in messages.
  TraceReader(const void* data, size_t size, std::string name = "<memory>");
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // Next complete chunk; false at the end of the data (including a truncated tail).
  bool next(ChunkView& out);

  // Sum of event_count over the chunk headers from the current position, walking headers only
  // (no checksums, no decompression): a capacity hint for loaders. Stops at the first bad header.
  uint64_t estimate_events() const;

  const FileHeader& header() const { return header_; }
  bool merged() const { return (header_.flags & kFileMerged) != 0; }
  const std::string& name() const { return name_; }
  const RecoveryInfo& recovery() const { return info_; }

  // Strings defined by the chunks read so far, indexed by StringId ("" when undefined).
  std::string_view string(StringId id) const {
    return id < strings_.size() ? std::string_view(strings_[id]) : std::string_view();
  }
  const std::vector<std::string>& strings() const { return strings_; }

 private:
  void open_header();
  [[noreturn]] void fail(uint64_t offset, const std::string& what) const;
  // A chunk at `at` that cannot be read, as a cut (next() returns false) when zeros reach from inside
  // it (before `end`) to the end of the file, else as the error `what` (Note [A tail of zeros]).
  bool cut_by_zeros(uint64_t at, uint64_t end, const std::string& what);
  bool truncated_at(uint64_t at, const std::string& why);

  std::string name_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;   // mmap'ed region when reading a file
  size_t map_size_ = 0;
  size_t pos_ = 0;
  uint64_t chunk_index_ = 0;
  FileHeader header_{};
  RecoveryInfo info_;
  std::vector<std::string> strings_;
  std::unique_ptr<class ChunkDecoder> dec_;
  std::vector<Event> recoded_;  // a version 1 chunk whose durations were coded again
};

}  // namespace memcomm::prof
