// TraceWriter: see Note [Crash safety] in trace_writer.hpp and Note [mct layout] in trace_format.hpp.
#include "memcomm/profiler/trace_writer.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <lz4.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "memcomm/profiler/clock.hpp"

namespace memcomm::prof {

const char* codec_name(Codec c) {
  switch (c) {
    case Codec::None: return "none";
    case Codec::Zstd: return "zstd";
    case Codec::Lz4: return "lz4";
  }
  return "unknown";
}

TraceWriter::TraceWriter(const std::string& path, const WriterOptions& options) : path_(path), opt_(options) {
  if (opt_.codec != Codec::None && opt_.codec != Codec::Zstd && opt_.codec != Codec::Lz4)
    throw TraceError(fmt::format("trace file '{}': unknown codec {}", path, unsigned(opt_.codec)));
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw TraceError(fmt::format("cannot create trace file '{}': {}", path, std::strerror(errno)));
  if (opt_.codec == Codec::Zstd) {
    auto* cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, opt_.zstd_level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    cctx_ = cctx;
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

void TraceWriter::close() {
  if (cctx_) {
    ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(cctx_));
    cctx_ = nullptr;
  }
  if (fd_ >= 0) {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw TraceError(fmt::format("closing trace file '{}': {}", path_, std::strerror(errno)));
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

void TraceWriter::write_one(const StringDef* strings, size_t n_strings, const Event* events, size_t n_events,
                            uint32_t rank) {
  size_t strings_size = 0;
  for (size_t i = 0; i < n_strings; ++i) strings_size += 8 + strings[i].text.size();
  strings_size = (strings_size + 7) & ~size_t(7);
  const size_t raw_size = strings_size + n_events * sizeof(Event);

  raw_.resize(raw_size);
  char* w = raw_.data();
  for (size_t i = 0; i < n_strings; ++i) {
    const uint32_t id = strings[i].id, len = uint32_t(strings[i].text.size());
    std::memcpy(w, &id, 4);
    std::memcpy(w + 4, &len, 4);
    std::memcpy(w + 8, strings[i].text.data(), len);
    w += 8 + len;
  }
  std::memset(w, 0, size_t(raw_.data() + strings_size - w));
  if (n_events) std::memcpy(raw_.data() + strings_size, events, n_events * sizeof(Event));

  ChunkHeader h{};
  h.magic = kChunkMagic;
  h.raw_size = uint32_t(raw_size);
  h.event_count = uint32_t(n_events);
  h.string_count = uint32_t(n_strings);
  h.strings_size = uint32_t(strings_size);
  h.rank = rank;
  h.codec = opt_.codec;

  size_t stored = raw_size;
  if (opt_.codec == Codec::Zstd) {
    out_.resize(sizeof(ChunkHeader) + ZSTD_compressBound(raw_size));
    const size_t r = ZSTD_compress2(static_cast<ZSTD_CCtx*>(cctx_), out_.data() + sizeof(ChunkHeader),
                                    out_.size() - sizeof(ChunkHeader), raw_.data(), raw_size);
    if (ZSTD_isError(r)) throw TraceError(fmt::format("zstd compression failed for '{}': {}", path_, ZSTD_getErrorName(r)));
    stored = r;
  } else if (opt_.codec == Codec::Lz4) {
    out_.resize(sizeof(ChunkHeader) + size_t(LZ4_compressBound(int(raw_size))));
    const int r = LZ4_compress_default(raw_.data(), out_.data() + sizeof(ChunkHeader), int(raw_size),
                                       int(out_.size() - sizeof(ChunkHeader)));
    if (r <= 0 && raw_size > 0) throw TraceError(fmt::format("lz4 compression failed for '{}'", path_));
    stored = size_t(r);
  } else {
    out_.resize(sizeof(ChunkHeader) + raw_size);
    std::memcpy(out_.data() + sizeof(ChunkHeader), raw_.data(), raw_size);
  }
  h.stored_size = uint32_t(stored);
  h.checksum = 0;
  h.checksum = trace_hash(out_.data() + sizeof(ChunkHeader), stored, trace_hash(&h, sizeof h));
  std::memcpy(out_.data(), &h, sizeof h);
  write_all(out_.data(), sizeof(ChunkHeader) + stored);  // one write: Note [Crash safety]
  events_ += n_events;
  ++chunks_;
}

}  // namespace memcomm::prof
