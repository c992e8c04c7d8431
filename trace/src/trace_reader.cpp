// TraceReader: see the header for the error and recovery contract.
#include "memcomm/trace/trace_reader.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "memcomm/common/input_file.hpp"
#include "memcomm/trace/chunk_codec.hpp"

namespace memcomm::prof {

TraceReader::TraceReader(const std::string& path) : name_(path), dec_(std::make_unique<ChunkDecoder>()) {
  if (const std::string problem = input_file_problem(path); !problem.empty())
    throw TraceError(fmt::format("{}: {}", path, problem));
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
    : name_(std::move(name)), data_(static_cast<const unsigned char*>(data)), size_(size),
      dec_(std::make_unique<ChunkDecoder>()) {
  open_header();
}

TraceReader::~TraceReader() {
  if (map_) ::munmap(map_, map_size_);
}

namespace {

// Version 1 stored a span's duration as plain nanoseconds, saturating at 2^32 - 1 ns; from 2^31 ns up
// such a value means another unit in version 2 (Note [Durations in 32 bits]), so it is coded again.
// Chunks without one are passed through uncopied.
const Event* recode_v1_durations(const Event* events, size_t count, std::vector<Event>& copy) {
  auto long_span = [](const Event& e) {
    return family_of(e.kind) == EventFamily::Compute && (e.as<ComputeEvent>().dur & 0x8000'0000u) != 0;
  };
  if (std::none_of(events, events + count, long_span)) return events;
  copy.assign(events, events + count);
  for (Event& e : copy) {
    if (!long_span(e)) continue;
    auto c = e.as<ComputeEvent>();
    c.dur = encode_duration32(int64_t(c.dur));
    e = Event::from(c);
  }
  return copy.data();
}

}  // namespace

void TraceReader::fail(uint64_t offset, const std::string& what) const {
  throw TraceError(fmt::format("{}: {} (at byte offset {})", name_, what, offset));
}

void TraceReader::open_header() {
  info_.file_bytes = size_;
  if (size_ == 0) fail(0, "empty file (0 bytes)");
  // A pickle (PROTO opcode first) is most likely a PyTorch memory snapshot: say which tools read it.
  if (static_cast<unsigned char>(data_[0]) == 0x80)
    fail(0, "a pickle (a PyTorch memory snapshot?), not a memcomm trace (.mct): snapshots are read by memcomm-trace "
            "memory, compare and advise, memcomm-replay and memcomm-view");
  if (size_ < sizeof(kFileMagic) || std::memcmp(data_, kFileMagic, sizeof kFileMagic) != 0) {
    std::string first;  // what the file starts with, as memcomm-replay and memcomm-view say it
    for (size_t i = 0; i < std::min<size_t>(size_, 4); ++i) first += fmt::format("{}{:02x}", i ? " " : "", data_[i]);
    fail(0, fmt::format("not a memcomm trace (.mct): bad magic (first bytes {}); the tools also read torch.profiler "
                        "traces (.json, .json.gz) and PyTorch memory snapshot pickles", first));
  }
  if (size_ < sizeof(FileHeader))
    fail(0, fmt::format("file header truncated: {} bytes, need {}", size_, sizeof(FileHeader)));
  std::memcpy(&header_, data_, sizeof header_);
  if (header_.format_version != kFormatVersion)
    fail(8, fmt::format("unsupported trace format version {} (this reader supports version {})",
                        header_.format_version, kFormatVersion));
  if (header_.event_version != kEventModelVersion && header_.event_version != kFirstEventModelVersion)
    fail(10, fmt::format("unsupported event model version {} (this reader supports versions {} to {})",
                         header_.event_version, kFirstEventModelVersion, kEventModelVersion));
  const uint32_t sum = uint32_t(trace_hash(&header_, offsetof(FileHeader, header_checksum)));
#ifdef MEMCOMM_FUZZING_BUILD  // Note [Fuzzing past checksums] in chunk_codec.cpp
  (void)sum;
#else
  if (sum != header_.header_checksum)
    fail(offsetof(FileHeader, header_checksum),
         fmt::format("file header checksum mismatch (stored {:#010x}, computed {:#010x})", header_.header_checksum, sum));
#endif
  if (header_.header_size < sizeof(FileHeader) || header_.header_size > size_)
    fail(12, fmt::format("bad header size {}", header_.header_size));
  pos_ = header_.header_size;
  info_.bytes_used = pos_;
}

uint64_t TraceReader::estimate_events() const {
  uint64_t n = 0;
  for (size_t p = pos_; p + sizeof(ChunkHeader) <= size_;) {
    ChunkHeader h;
    std::memcpy(&h, data_ + p, sizeof h);
    if (!ChunkDecoder::check_header(h, kMaxChunkRawBytes).empty() || h.stored_size > size_ - p - sizeof h) break;
    n += h.event_count;
    p += sizeof h + h.stored_size;
  }
  return n;
}

// Note [A tail of zeros]
// The writer appends each chunk in one write, so a killed process leaves whole chunks, or a last one
// cut short (Note [Crash safety]). A host that crashes or loses power leaves something else: on ext4
// and xfs the file's size can be on disk before its last blocks are, which then read as zeros. Read
// as corruption, 20 zero bytes after the last chunk lost the whole file (7 complete chunks, "bad
// chunk magic"), as did a last chunk whose last blocks were zeros ("checksum mismatch"). So a chunk
// that cannot be read is the file's cut when zeros run from its start to the end of the file, or
// from inside it to the end as whole blocks do: from a 512-byte boundary, 512 bytes or more (a chunk
// that ends in a few zero bytes of its own and is damaged elsewhere stays corrupt). The chunks before
// it are kept and the reader warns, as for a killed writer. A chunk damaged anywhere else, with data
// after it, is still corruption (exit 2).
constexpr size_t kBlock = 512;
bool TraceReader::truncated_at(uint64_t at, const std::string& why) {
  info_.truncated = true;
  info_.truncated_bytes = size_ - at;
  info_.detail = fmt::format("chunk {} at byte offset {} is incomplete ({}); recovered {} complete chunks, {} events",
                             chunk_index_, at, why, info_.chunks, info_.events);
  pos_ = size_;
  return false;
}

bool TraceReader::cut_by_zeros(uint64_t at, uint64_t end, const std::string& what) {
  size_t zeros_from = size_;
  while (zeros_from > at && data_[zeros_from - 1] == 0) --zeros_from;
  const bool blocks = zeros_from % kBlock == 0 && size_ - zeros_from >= kBlock && zeros_from < end;
  if (zeros_from == size_ || (zeros_from > at && !blocks)) fail(at, what);
  return truncated_at(at, fmt::format("zeros from byte offset {} to the end of the file, as a crash of the host "
                                      "leaves", zeros_from));
}

bool TraceReader::next(ChunkView& out) {
  if (pos_ >= size_) return false;
  const uint64_t at = pos_;
  const size_t left = size_ - pos_;
  if (left < sizeof(ChunkHeader)) {
    // A partial header is what a killed writer leaves, provided what is there is a header's start.
    const size_t cmp = std::min<size_t>(left, 4);
    if (std::memcmp(data_ + pos_, &kChunkMagic, cmp) != 0)
      return cut_by_zeros(at, size_, fmt::format("chunk {}: bad chunk magic", chunk_index_));
    return truncated_at(at, fmt::format("{} of {} header bytes", left, sizeof(ChunkHeader)));
  }
  ChunkHeader h;
  std::memcpy(&h, data_ + pos_, sizeof h);
  if (const std::string bad = ChunkDecoder::check_header(h, kMaxChunkRawBytes); !bad.empty())
    return cut_by_zeros(at, at + sizeof h, fmt::format("chunk {}: {}", chunk_index_, bad));
  if (uint64_t(h.stored_size) > left - sizeof(ChunkHeader))
    return truncated_at(at, fmt::format("{} of {} payload bytes", left - sizeof(ChunkHeader), h.stored_size));

  const unsigned char* payload = data_ + pos_ + sizeof(ChunkHeader);
  const Event* events = nullptr;
  size_t count = 0;
  if (const std::string bad = dec_->decode(h, payload, strings_, events, count); !bad.empty())
    return cut_by_zeros(at, at + sizeof h + h.stored_size, fmt::format("chunk {}: {}", chunk_index_, bad));

  if (header_.event_version == kFirstEventModelVersion) events = recode_v1_durations(events, count, recoded_);
  out.rank = h.rank;
  out.events = events;
  out.count = count;
  out.file_offset = at;
  out.index = chunk_index_++;
  pos_ += sizeof(ChunkHeader) + h.stored_size;
  info_.bytes_used = pos_;
  ++info_.chunks;
  info_.events += h.event_count;
  return true;
}

}  // namespace memcomm::prof
