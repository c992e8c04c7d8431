// TraceWriter: appends checksummed, compressed chunks to a .mct file (format in trace_format.hpp).
//
// Note [Crash safety]
// Each chunk is built in memory and handed to the kernel with one write() (looping only on short
// writes), and the file is only ever appended to. A process killed with SIGKILL therefore leaves
// complete chunks plus at most one partial chunk at the end; the reader keeps the complete ones
// and reports the partial tail as "truncated". No fsync is needed for SIGKILL (the page cache
// survives the process); sync() is offered for power-loss durability at chunk granularity.
//
// Note [One writer per trace file]
// Two processes that pick the same file name (processes of torch.multiprocessing.spawn that start a
// profile before their process group exists, and so all call themselves rank 0; two runs of one
// script) would each truncate the file and interleave their chunks into a file no reader can
// check. So a writer holds an exclusive flock on its file from before it truncates it until it
// closes it, and a second writer gets TraceFileBusy instead of truncating: the file being written is
// kept, and the caller may pick another name. (flock, not O_EXCL: a finished trace of an earlier run
// is still overwritten, as users expect.) The lock belongs to the open file, so a process forked
// while it is written (a DataLoader worker) holds it until that process exits too; on NFS, Linux
// emulates flock with per-process fcntl locks, which still keep out other processes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memcomm/trace/trace_error.hpp"
#include "memcomm/trace/trace_format.hpp"

namespace memcomm::prof {

struct StringDef {
  StringId id;             // id used by events
  std::string_view text;   // its text
};

struct WriterOptions {
  uint32_t rank = kUnknownRank;   // recorded rank (FileHeader::rank and default chunk rank)
  uint32_t world_size = 0;
  bool merged = false;            // several ranks, timestamps already on one timeline
  Codec codec = Codec::Lz4;       // see Codec: lz4 for speed, zstd for size
  int zstd_level = 1;             // zstd only: 1 is fast; negative levels are faster still
};

class TraceWriter {
 public:
  // Creates/truncates `path` and writes the header. Throws TraceError naming the path on failure,
  // TraceFileBusy when another writer holds it (Note [One writer per trace file]).
  TraceWriter(const std::string& path, const WriterOptions& options = {});
  ~TraceWriter();  // closes; errors at that point are swallowed (call close() to see them)
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Appends one chunk (or several, if the events exceed kMaxChunkRawBytes; strings go first).
  // `rank` defaults to the file's rank. Throws TraceError on I/O failure.
  void write_chunk(const StringDef* strings, size_t n_strings, const Event* events, size_t n_events,
                   uint32_t rank = kUnknownRank);
  void write_chunk(const std::vector<StringDef>& strings, const std::vector<Event>& events,
                   uint32_t rank = kUnknownRank) {
    write_chunk(strings.data(), strings.size(), events.data(), events.size(), rank);
  }
  // Appends chunk bytes made by a ChunkEncoder elsewhere (parallel compression), in one write.
  void write_encoded(const char* data, size_t n, uint64_t n_events);
  void sync();   // fdatasync: complete chunks survive power loss too
  void close();  // idempotent; throws TraceError when the file was removed from its path meanwhile
  bool removed() const { return removed_; }  // after close(): the file was no longer at its path

  const std::string& path() const { return path_; }
  const WriterOptions& options() const { return opt_; }
  uint64_t bytes_written() const { return bytes_; }
  uint64_t events_written() const { return events_; }
  uint64_t chunks_written() const { return chunks_; }

 private:
  void write_one(const StringDef* strings, size_t n_strings, const Event* events, size_t n_events, uint32_t rank);
  void write_all(const void* data, size_t n);
  bool gone_from_path() const;

  std::string path_;
  std::string absolute_path_;  // where gone_from_path() looks
  WriterOptions opt_;
  int fd_ = -1;
  std::unique_ptr<class ChunkEncoder> enc_;
  std::vector<char> out_;          // reused: header + stored payload
  uint64_t bytes_ = 0, events_ = 0, chunks_ = 0;
  bool removed_ = false;
};

}  // namespace memcomm::prof
