// TraceReader: see the header for the error and recovery contract.
#include "memcomm/profiler/trace_reader.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <lz4.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace memcomm::prof {

TraceReader::TraceReader(const std::string& path) : name_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw TraceError(fmt::format("cannot open trace file '{}': {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw TraceError(fmt::format("cannot stat trace file '{}': {}", path, std::strerror(err)));
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      map_ = nullptr;
      throw TraceError(fmt::format("cannot map trace file '{}': {}", path, std::strerror(err)));
    }
    map_size_ = size_;
    ::madvise(map_, size_, MADV_SEQUENTIAL);
    data_ = static_cast<const unsigned char*>(map_);
  }
  ::close(fd);
  try {
    open_header();
  } catch (...) {
    if (map_) ::munmap(map_, map_size_);
    map_ = nullptr;
    throw;
  }
}

TraceReader::TraceReader(const void* data, size_t size, std::string name)
    : name_(std::move(name)), data_(static_cast<const unsigned char*>(data)), size_(size) {
  open_header();
}

TraceReader::~TraceReader() {
  if (map_) ::munmap(map_, map_size_);
  if (dctx_) ZSTD_freeDCtx(static_cast<ZSTD_DCtx*>(dctx_));
}

void TraceReader::fail(uint64_t offset, const std::string& what) const {
  throw TraceError(fmt::format("{}: {} (at byte offset {})", name_, what, offset));
}

void TraceReader::open_header() {
  info_.file_bytes = size_;
  if (size_ < sizeof(kFileMagic) || std::memcmp(data_, kFileMagic, sizeof kFileMagic) != 0)
    fail(0, "not a memcomm trace (.mct): bad magic");
  if (size_ < sizeof(FileHeader))
    fail(0, fmt::format("file header truncated: {} bytes, need {}", size_, sizeof(FileHeader)));
  std::memcpy(&header_, data_, sizeof header_);
  if (header_.format_version != kFormatVersion)
    fail(8, fmt::format("unsupported trace format version {} (this reader supports version {})",
                        header_.format_version, kFormatVersion));
  if (header_.event_version != kEventModelVersion)
    fail(10, fmt::format("unsupported event model version {} (this reader supports version {})",
                         header_.event_version, kEventModelVersion));
  const uint32_t sum = uint32_t(trace_hash(&header_, offsetof(FileHeader, header_checksum)));
  if (sum != header_.header_checksum)
    fail(offsetof(FileHeader, header_checksum),
         fmt::format("file header checksum mismatch (stored {:#010x}, computed {:#010x})", header_.header_checksum, sum));
  if (header_.header_size < sizeof(FileHeader) || header_.header_size > size_)
    fail(12, fmt::format("bad header size {}", header_.header_size));
  pos_ = header_.header_size;
  info_.bytes_used = pos_;
}

bool TraceReader::next(ChunkView& out) {
  if (pos_ >= size_) return false;
  const uint64_t at = pos_;
  const size_t left = size_ - pos_;
  auto truncated = [&](const std::string& why) {
    info_.truncated = true;
    info_.truncated_bytes = left;
    info_.detail = fmt::format("chunk {} at byte offset {} is incomplete ({}); recovered {} complete chunks, {} events",
                               chunk_index_, at, why, info_.chunks, info_.events);
    pos_ = size_;
    return false;
  };
  if (left < sizeof(ChunkHeader)) {
    // A partial header is what a killed writer leaves, provided what is there is a header's start.
    const size_t cmp = std::min<size_t>(left, 4);
    if (std::memcmp(data_ + pos_, &kChunkMagic, cmp) != 0) fail(at, fmt::format("chunk {}: bad chunk magic", chunk_index_));
    return truncated(fmt::format("{} of {} header bytes", left, sizeof(ChunkHeader)));
  }
  ChunkHeader h;
  std::memcpy(&h, data_ + pos_, sizeof h);
  if (h.magic != kChunkMagic) fail(at, fmt::format("chunk {}: bad chunk magic {:#010x}", chunk_index_, h.magic));
  if (h.raw_size > kMaxChunkRawBytes)
    fail(at + 8, fmt::format("chunk {}: raw size {} exceeds the limit of {} bytes", chunk_index_, h.raw_size, kMaxChunkRawBytes));
  if (h.codec != Codec::None && h.codec != Codec::Zstd && h.codec != Codec::Lz4)
    fail(at + 28, fmt::format("chunk {}: unknown codec {}", chunk_index_, unsigned(h.codec)));
  if (uint64_t(h.strings_size) + uint64_t(h.event_count) * sizeof(Event) != h.raw_size || (h.strings_size & 7) != 0 ||
      (h.codec == Codec::None && h.stored_size != h.raw_size) ||
      (h.codec == Codec::Zstd && h.stored_size > ZSTD_compressBound(h.raw_size)) ||
      (h.codec == Codec::Lz4 && h.stored_size > uint32_t(LZ4_compressBound(int(h.raw_size)))))
    fail(at + 4, fmt::format("chunk {}: inconsistent lengths (stored {}, raw {}, strings {}, events {})", chunk_index_,
                             h.stored_size, h.raw_size, h.strings_size, h.event_count));
  if (uint64_t(h.stored_size) > left - sizeof(ChunkHeader))
    return truncated(fmt::format("{} of {} payload bytes", left - sizeof(ChunkHeader), h.stored_size));

  const unsigned char* payload = data_ + pos_ + sizeof(ChunkHeader);
  ChunkHeader zeroed = h;
  zeroed.checksum = 0;
  const uint64_t sum = trace_hash(payload, h.stored_size, trace_hash(&zeroed, sizeof zeroed));
  if (sum != h.checksum)
    fail(at, fmt::format("chunk {}: checksum mismatch (stored {:#018x}, computed {:#018x}): the file is corrupt",
                         chunk_index_, h.checksum, sum));

  buf_.resize((h.raw_size + 7) / 8);
  const unsigned char* raw = payload;
  if (h.codec == Codec::Zstd) {
    if (!dctx_) dctx_ = ZSTD_createDCtx();
    const size_t r = ZSTD_decompressDCtx(static_cast<ZSTD_DCtx*>(dctx_), buf_.data(), h.raw_size, payload, h.stored_size);
    if (ZSTD_isError(r))
      fail(at, fmt::format("chunk {}: zstd decompression failed: {}", chunk_index_, ZSTD_getErrorName(r)));
    if (r != h.raw_size)
      fail(at, fmt::format("chunk {}: decompressed to {} bytes, header says {}", chunk_index_, r, h.raw_size));
    raw = reinterpret_cast<const unsigned char*>(buf_.data());
  } else if (h.codec == Codec::Lz4) {
    const int r = LZ4_decompress_safe(reinterpret_cast<const char*>(payload), reinterpret_cast<char*>(buf_.data()),
                                      int(h.stored_size), int(h.raw_size));
    if (r < 0) fail(at, fmt::format("chunk {}: lz4 decompression failed (corrupt payload)", chunk_index_));
    if (uint32_t(r) != h.raw_size)
      fail(at, fmt::format("chunk {}: decompressed to {} bytes, header says {}", chunk_index_, r, h.raw_size));
    raw = reinterpret_cast<const unsigned char*>(buf_.data());
  } else if ((reinterpret_cast<uintptr_t>(payload) & 7) != 0) {
    std::memcpy(buf_.data(), payload, h.raw_size);
    raw = reinterpret_cast<const unsigned char*>(buf_.data());
  }

  // String definitions.
  size_t s = 0;
  for (uint32_t i = 0; i < h.string_count; ++i) {
    if (s + 8 > h.strings_size) fail(at, fmt::format("chunk {}: string table overruns its {} bytes", chunk_index_, h.strings_size));
    uint32_t id, len;
    std::memcpy(&id, raw + s, 4);
    std::memcpy(&len, raw + s + 4, 4);
    if (len > h.strings_size - s - 8)
      fail(at, fmt::format("chunk {}: string {} of length {} overruns the string table", chunk_index_, id, len));
    if (id > (16u << 20)) fail(at, fmt::format("chunk {}: string id {} is implausibly large", chunk_index_, id));
    if (id >= strings_.size()) strings_.resize(size_t(id) + 1);
    strings_[id].assign(reinterpret_cast<const char*>(raw + s + 8), len);
    s += 8 + len;
  }

  out.rank = h.rank;
  out.events = reinterpret_cast<const Event*>(raw + h.strings_size);
  out.count = h.event_count;
  out.file_offset = at;
  out.index = chunk_index_++;
  pos_ += sizeof(ChunkHeader) + h.stored_size;
  info_.bytes_used = pos_;
  ++info_.chunks;
  info_.events += h.event_count;
  return true;
}

}  // namespace memcomm::prof
