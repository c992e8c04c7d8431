// The .mct trace file format (on-disk layout; little-endian, packed).
//
// Note [mct layout]
//   FileHeader (64 bytes)
//   Chunk*: ChunkHeader (40 bytes) + `stored_size` bytes of payload
// A chunk's payload, once decompressed (codec zstd or lz4) or as is (codec none), is `raw_size` bytes:
//   string definitions: string_count x { u32 id, u32 length, length bytes }, zero-padded to a
//                       multiple of 8 (strings_size bytes in all)
//   events:             event_count x Event (24 bytes each, event.hpp)
// Strings are defined in the chunk where they are first used, or an earlier one, so every prefix
// of complete chunks is a self-contained trace. That is what makes a file cut short by SIGKILL
// readable up to its last complete chunk (Note [Crash safety] in trace_writer.hpp).
// The checksum covers the chunk header (with checksum = 0) and the stored payload, so a flipped
// bit anywhere in a chunk is reported before decompression; zstd's own frame checksum then guards
// the decompressed bytes.
//
// A file holds one rank (header.rank) or, when merged, several: each chunk names its rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "memcomm/trace/event.hpp"

namespace memcomm::prof {

inline constexpr char kFileMagic[8] = {'M', 'E', 'M', 'C', 'T', 'R', 'C', '\x1A'};
// Whether a file's first `n` bytes begin a memcomm trace: how every tool that takes several formats
// tells a .mct file.
inline bool is_mct_start(const void* head, size_t n) {
  return n >= sizeof kFileMagic && std::memcmp(head, kFileMagic, sizeof kFileMagic) == 0;
}
inline constexpr uint16_t kFormatVersion = 1;
inline constexpr uint32_t kChunkMagic = 0x4B43434D;  // "MCCK"
inline constexpr uint32_t kMaxChunkRawBytes = 64u << 20;  // readers refuse larger chunks
inline constexpr uint32_t kUnknownRank = 0xFFFF'FFFFu;

// Payload compression. Lz4 is the recorder's default: it keeps up with >= 20 M events/s on one
// core and reads back at >= 50 M events/s; zstd makes files ~2x smaller at a fraction of the speed
// (merge and archives). zstd frames also carry their own content checksum.
enum class Codec : uint8_t { None = 0, Zstd = 1, Lz4 = 2 };
const char* codec_name(Codec c);

enum FileFlags : uint16_t {
  kFileMerged = 1,          // chunks come from several ranks; timestamps already on one timeline
};

#pragma pack(push, 1)
struct FileHeader {
  char magic[8];             // kFileMagic
  uint16_t format_version;   // kFormatVersion
  uint16_t event_version;    // kEventModelVersion of the records
  uint16_t header_size;      // sizeof(FileHeader), lets later versions grow it
  uint16_t flags;            // FileFlags
  uint32_t rank;             // the rank recorded, kUnknownRank when merged or not distributed
  uint32_t world_size;       // 0 when unknown
  int64_t created_realtime_ns;  // wall clock when the file was opened
  int64_t created_monotonic_ns; // CLOCK_MONOTONIC at the same moment (pairs the two clocks)
  uint8_t reserved[20];      // zero
  uint32_t header_checksum;  // low 32 bits of trace_hash over the bytes before this field
};

struct ChunkHeader {
  uint32_t magic;            // kChunkMagic
  uint32_t stored_size;      // payload bytes following this header in the file
  uint32_t raw_size;         // payload bytes after decompression
  uint32_t event_count;      // events in the chunk
  uint32_t string_count;     // string definitions in the chunk
  uint32_t strings_size;     // bytes of string definitions (multiple of 8)
  uint32_t rank;             // rank of these events (merged files; else the file's rank)
  Codec codec;               // payload compression
  uint8_t reserved[3];       // zero
  uint64_t checksum;         // trace_hash(header with checksum = 0, payload)
};
#pragma pack(pop)

static_assert(sizeof(FileHeader) == 64);
static_assert(sizeof(ChunkHeader) == 40);

// A fast 64-bit hash for chunk integrity (not cryptographic). `seed` chains calls.
uint64_t trace_hash(const void* data, size_t n, uint64_t seed = 0);

// trace_hash over data that comes in pieces: digest() equals trace_hash(all of it, seed).
class TraceHasher {
 public:
  explicit TraceHasher(uint64_t seed = 0);
  ~TraceHasher();
  TraceHasher(const TraceHasher&) = delete;
  TraceHasher& operator=(const TraceHasher&) = delete;
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;  // XXH3's streaming state
};

}  // namespace memcomm::prof
