// TraceWriter: see Note [Crash safety] in trace_writer.hpp and Note [mct layout] in trace_format.hpp.
#include "memcomm/trace/trace_writer.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "memcomm/trace/chunk_codec.hpp"
#include "memcomm/trace/clock.hpp"

namespace memcomm::prof {

TraceWriter::TraceWriter(const std::string& path, const WriterOptions& options) : path_(path), opt_(options) {
  if (opt_.codec != Codec::None && opt_.codec != Codec::Zstd && opt_.codec != Codec::Lz4)
    throw TraceError(fmt::format("trace file '{}': unknown codec {}", path, unsigned(opt_.codec)));
  enc_ = std::make_unique<ChunkEncoder>(opt_.codec, opt_.zstd_level);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);  // truncated once it is ours
  if (fd_ < 0) throw TraceError(fmt::format("cannot create trace file '{}': {}", path, std::strerror(errno)));
  std::error_code ec;
  absolute_path_ = std::filesystem::absolute(path, ec).string();  // the program may change its folder meanwhile
  if (ec) absolute_path_ = path;
  // Note [One writer per trace file]. A file system without locks (ENOLCK) is written unguarded.
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    close();
    throw TraceFileBusy(fmt::format("trace file '{}' is being written by another process", path));
  }
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && ::ftruncate(fd_, 0) != 0) {  // not /dev/null, a FIFO
    const int err = errno;
    close();
    throw TraceError(fmt::format("cannot truncate trace file '{}': {}", path, std::strerror(err)));
  }
  FileHeader h{};
  std::memcpy(h.magic, kFileMagic, sizeof h.magic);
  h.format_version = kFormatVersion;
  h.event_version = kEventModelVersion;
  h.header_size = sizeof(FileHeader);
  h.flags = opt_.merged ? kFileMerged : 0;
  h.rank = opt_.rank;
  h.world_size = opt_.world_size;
  h.created_realtime_ns = realtime_ns();
  h.created_monotonic_ns = monotonic_ns();
  h.header_checksum = uint32_t(trace_hash(&h, offsetof(FileHeader, header_checksum)));
  try {
    write_all(&h, sizeof h);
  } catch (...) {
    close();
    throw;
  }
}

TraceWriter::~TraceWriter() {
  try {
    close();
  } catch (...) {
  }
}

// A file that no longer is at its path (removed, or replaced by another) took every write and keeps
// nothing: said at close, or the run would point at a file that is not there.
bool TraceWriter::gone_from_path() const {
  struct stat mine {}, named {};
  if (::fstat(fd_, &mine) != 0 || !S_ISREG(mine.st_mode)) return false;
  return mine.st_nlink == 0 || ::stat(absolute_path_.c_str(), &named) != 0 || named.st_ino != mine.st_ino ||
         named.st_dev != mine.st_dev;
}

void TraceWriter::close() {
  if (fd_ >= 0) {
    removed_ = gone_from_path();
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw TraceError(fmt::format("closing trace file '{}': {}", path_, std::strerror(errno)));
    if (removed_)
      throw TraceError(fmt::format("trace file '{}' was removed (or replaced) while it was written: its {} events are "
                                   "gone", path_, events_));
  }
}

void TraceWriter::sync() {
  if (fd_ >= 0 && ::fdatasync(fd_) != 0)
    throw TraceError(fmt::format("fdatasync of trace file '{}': {}", path_, std::strerror(errno)));
}

void TraceWriter::write_all(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw TraceError(fmt::format("writing trace file '{}': {}", path_, std::strerror(errno)));
    }
    p += w;
    n -= size_t(w);
    bytes_ += uint64_t(w);
  }
}

void TraceWriter::write_chunk(const StringDef* strings, size_t n_strings, const Event* events, size_t n_events,
                              uint32_t rank) {
  if (fd_ < 0) throw TraceError(fmt::format("trace file '{}' is closed", path_));
  if (rank == kUnknownRank) rank = opt_.rank;
  // Split so no chunk exceeds the reader's limit; string definitions ride in the first piece.
  size_t string_bytes = 0;
  for (size_t i = 0; i < n_strings; ++i) string_bytes += 8 + strings[i].text.size();
  if (string_bytes + 8 > kMaxChunkRawBytes / 2) {
    // Pathological: many long names. Spread them over string-only chunks first.
    size_t begin = 0, acc = 0;
    for (size_t i = 0; i < n_strings; ++i) {
      const size_t sz = 8 + strings[i].text.size();
      if (acc + sz > kMaxChunkRawBytes / 2 && i > begin) {
        write_one(strings + begin, i - begin, nullptr, 0, rank);
        begin = i;
        acc = 0;
      }
      acc += sz;
    }
    write_one(strings + begin, n_strings - begin, nullptr, 0, rank);
    n_strings = 0;
    string_bytes = 0;
  }
  const size_t max_events = (kMaxChunkRawBytes - string_bytes - 8) / sizeof(Event);
  size_t done = 0;
  do {
    const size_t n = std::min(n_events - done, max_events);
    write_one(done == 0 ? strings : nullptr, done == 0 ? n_strings : 0, events + done, n, rank);
    done += n;
  } while (done < n_events);
}

void TraceWriter::write_encoded(const char* data, size_t n, uint64_t n_events) {
  if (fd_ < 0) throw TraceError(fmt::format("trace file '{}' is closed", path_));
  write_all(data, n);  // one write: Note [Crash safety]
  events_ += n_events;
  ++chunks_;
}

void TraceWriter::write_one(const StringDef* strings, size_t n_strings, const Event* events, size_t n_events,
                            uint32_t rank) {
  out_.clear();
  enc_->encode(strings, n_strings, events, n_events, rank, out_);
  write_all(out_.data(), out_.size());  // one write: Note [Crash safety]
  events_ += n_events;
  ++chunks_;
}

}  // namespace memcomm::prof
