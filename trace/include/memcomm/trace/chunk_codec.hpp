// Encoding and decoding of one chunk (Note [mct layout] in trace_format.hpp). Shared by the trace
// file writer/reader and the live stream, whose frames are chunks too: one validation path for
// every byte memcomm reads from outside.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memcomm/trace/trace_format.hpp"
#include "memcomm/trace/trace_writer.hpp"

namespace memcomm::prof {

class ChunkEncoder {
 public:
  explicit ChunkEncoder(Codec codec = Codec::Lz4, int zstd_level = 1);
  ~ChunkEncoder();
  ChunkEncoder(const ChunkEncoder&) = delete;
  ChunkEncoder& operator=(const ChunkEncoder&) = delete;

  // Appends ChunkHeader + payload to `out`. The caller keeps raw size <= kMaxChunkRawBytes.
  void encode(const StringDef* strings, size_t n_strings, const Event* events, size_t n_events, uint32_t rank,
              std::vector<char>& out);
  Codec codec() const { return codec_; }

 private:
  Codec codec_;
  int level_;
  void* cctx_ = nullptr;  // ZSTD_CCtx*
  std::vector<char> raw_;
};

class ChunkDecoder {
 public:
  ChunkDecoder() = default;
  ~ChunkDecoder();
  ChunkDecoder(const ChunkDecoder&) = delete;
  ChunkDecoder& operator=(const ChunkDecoder&) = delete;

  // Checks a header's magic, codec and lengths without touching the payload. Returns "" when
  // fine, else what is wrong. `max_raw` bounds raw_size (kMaxChunkRawBytes for files).
  static std::string check_header(const ChunkHeader& h, uint32_t max_raw);

  // Verifies the checksum, decompresses and parses the string definitions into `strings`
  // (indexed by id; grown as needed; new_defs, when given, receives the definitions in order).
  // On success fills events/count (valid until the next decode) and returns "".
  std::string decode(const ChunkHeader& h, const unsigned char* payload, std::vector<std::string>& strings,
                     const Event*& events, size_t& count, std::vector<StringDef>* new_defs = nullptr);

 private:
  void* dctx_ = nullptr;  // ZSTD_DCtx*
  std::vector<uint64_t> buf_;
};

}  // namespace memcomm::prof
