// ChunkEncoder / ChunkDecoder: see chunk_codec.hpp and Note [mct layout].
#include "memcomm/trace/chunk_codec.hpp"

#include <lz4.h>
#include <zstd.h>

#include <cstring>

#include <fmt/format.h>

namespace memcomm::prof {

#ifdef MEMCOMM_FUZZING_BUILD
constexpr bool kFuzzingBuild = true;
#else
constexpr bool kFuzzingBuild = false;
#endif

// Note [lz4 acceleration]
// lz4 costs ~60 % of a file sink's CPU (perf on BM_WriteFile). Our events are 24-byte records whose
// matches are whole fields (timestamps' high bytes, repeated addresses and sizes), which lz4 still
// finds when it skips faster through unmatched input. Measured on 64 Ki-event chunks of the demo's
// trace and of the benchmark's training-like stream (three runs each, this 2-core VM):
//   acceleration 1: 12-26 and 17-24 M events/s, 10.30 and 15.32 B/event
//   acceleration 4: 24-25 and 25-29 M events/s,  9.94 and 14.81 B/event
//   acceleration 8: 25-27 and 31-40 M events/s, 10.18 and 15.01 B/event
// 8 buys the speed for 2 % more bytes than 4 and is still smaller than the default; above 8 files grow.
constexpr int kLz4Acceleration = 8;

const char* codec_name(Codec c) {
  switch (c) {
    case Codec::None: return "none";
    case Codec::Zstd: return "zstd";
    case Codec::Lz4: return "lz4";
  }
  return "unknown";
}

ChunkEncoder::ChunkEncoder(Codec codec, int zstd_level) : codec_(codec), level_(zstd_level) {
  if (codec_ != Codec::None && codec_ != Codec::Zstd && codec_ != Codec::Lz4)
    throw TraceError(fmt::format("unknown chunk codec {}", unsigned(codec_)));
  if (codec_ == Codec::Zstd) {
    auto* cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level_);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    cctx_ = cctx;
  }
}

ChunkEncoder::~ChunkEncoder() {
  if (cctx_) ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(cctx_));
}

void ChunkEncoder::encode(const StringDef* strings, size_t n_strings, const Event* events, size_t n_events,
                          uint32_t rank, std::vector<char>& out) {
  size_t strings_size = 0;
  for (size_t i = 0; i < n_strings; ++i) strings_size += 8 + strings[i].text.size();
  strings_size = (strings_size + 7) & ~size_t(7);
  const size_t raw_size = strings_size + n_events * sizeof(Event);
  if (raw_size > kMaxChunkRawBytes) throw TraceError(fmt::format("chunk of {} bytes exceeds the limit", raw_size));

  // Most chunks carry no new strings: their payload is the events as they lie, compressed in place.
  const char* raw = reinterpret_cast<const char*>(events);
  if (n_strings > 0 || n_events == 0) {
    raw_.resize(raw_size);
    char* w = raw_.data();
    for (size_t i = 0; i < n_strings; ++i) {
      const uint32_t id = strings[i].id, len = uint32_t(strings[i].text.size());
      std::memcpy(w, &id, 4);
      std::memcpy(w + 4, &len, 4);
      if (len) std::memcpy(w + 8, strings[i].text.data(), len);
      w += 8 + len;
    }
    std::memset(w, 0, size_t(raw_.data() + strings_size - w));
    if (n_events) std::memcpy(raw_.data() + strings_size, events, n_events * sizeof(Event));
    raw = raw_.data();
  }

  ChunkHeader h{};
  h.magic = kChunkMagic;
  h.raw_size = uint32_t(raw_size);
  h.event_count = uint32_t(n_events);
  h.string_count = uint32_t(n_strings);
  h.strings_size = uint32_t(strings_size);
  h.rank = rank;
  h.codec = codec_;

  const size_t base = out.size();
  size_t stored = raw_size;
  if (codec_ == Codec::Zstd) {
    out.resize(base + sizeof(ChunkHeader) + ZSTD_compressBound(raw_size));
    const size_t r = ZSTD_compress2(static_cast<ZSTD_CCtx*>(cctx_), out.data() + base + sizeof(ChunkHeader),
                                    out.size() - base - sizeof(ChunkHeader), raw, raw_size);
    if (ZSTD_isError(r)) throw TraceError(fmt::format("zstd compression failed: {}", ZSTD_getErrorName(r)));
    stored = r;
  } else if (codec_ == Codec::Lz4) {
    out.resize(base + sizeof(ChunkHeader) + size_t(LZ4_compressBound(int(raw_size))));
    const int r = LZ4_compress_fast(raw, out.data() + base + sizeof(ChunkHeader), int(raw_size),
                                    int(out.size() - base - sizeof(ChunkHeader)), kLz4Acceleration);
    if (r <= 0 && raw_size > 0) throw TraceError("lz4 compression failed");
    stored = size_t(r);
  } else {
    out.resize(base + sizeof(ChunkHeader) + raw_size);
    if (raw_size) std::memcpy(out.data() + base + sizeof(ChunkHeader), raw, raw_size);
  }
  out.resize(base + sizeof(ChunkHeader) + stored);
  h.stored_size = uint32_t(stored);
  h.checksum = 0;
  h.checksum = trace_hash(out.data() + base + sizeof(ChunkHeader), stored, trace_hash(&h, sizeof h));
  std::memcpy(out.data() + base, &h, sizeof h);
}

ChunkDecoder::~ChunkDecoder() {
  if (dctx_) ZSTD_freeDCtx(static_cast<ZSTD_DCtx*>(dctx_));
}

std::string ChunkDecoder::check_header(const ChunkHeader& h, uint32_t max_raw) {
  if (h.magic != kChunkMagic) return fmt::format("bad chunk magic {:#010x}", h.magic);
  if (h.raw_size > max_raw) return fmt::format("raw size {} exceeds the limit of {} bytes", h.raw_size, max_raw);
  if (h.codec != Codec::None && h.codec != Codec::Zstd && h.codec != Codec::Lz4)
    return fmt::format("unknown codec {}", unsigned(h.codec));
  if (uint64_t(h.strings_size) + uint64_t(h.event_count) * sizeof(Event) != h.raw_size || (h.strings_size & 7) != 0 ||
      (h.codec == Codec::None && h.stored_size != h.raw_size) ||
      (h.codec == Codec::Zstd && h.stored_size > ZSTD_compressBound(h.raw_size)) ||
      (h.codec == Codec::Lz4 && h.stored_size > uint32_t(LZ4_compressBound(int(h.raw_size)))))
    return fmt::format("inconsistent lengths (stored {}, raw {}, strings {}, events {})", h.stored_size, h.raw_size,
                       h.strings_size, h.event_count);
  return {};
}

std::string ChunkDecoder::decode(const ChunkHeader& h, const unsigned char* payload, std::vector<std::string>& strings,
                                 const Event*& events, size_t& count, std::vector<StringDef>* new_defs) {
  ChunkHeader zeroed = h;
  zeroed.checksum = 0;
  const uint64_t sum = trace_hash(payload, h.stored_size, trace_hash(&zeroed, sizeof zeroed));
  // Note [Fuzzing past checksums]: fuzz builds read on after a mismatch, so that the fuzzer
  // reaches the decompressors and parsers behind the checksum.
  if (sum != h.checksum && !kFuzzingBuild)
    return fmt::format("checksum mismatch (stored {:#018x}, computed {:#018x}): the data is corrupt", h.checksum, sum);

  buf_.resize((size_t(h.raw_size) + 7) / 8);
  const unsigned char* raw = payload;
  if (h.codec == Codec::Zstd) {
    if (!dctx_) dctx_ = ZSTD_createDCtx();
    const size_t r = ZSTD_decompressDCtx(static_cast<ZSTD_DCtx*>(dctx_), buf_.data(), h.raw_size, payload, h.stored_size);
    if (ZSTD_isError(r)) return fmt::format("zstd decompression failed: {}", ZSTD_getErrorName(r));
    if (r != h.raw_size) return fmt::format("decompressed to {} bytes, header says {}", r, h.raw_size);
    raw = reinterpret_cast<const unsigned char*>(buf_.data());
  } else if (h.codec == Codec::Lz4) {
    const int r = LZ4_decompress_safe(reinterpret_cast<const char*>(payload), reinterpret_cast<char*>(buf_.data()),
                                      int(h.stored_size), int(h.raw_size));
    if (r < 0) return "lz4 decompression failed (corrupt payload)";
    if (uint32_t(r) != h.raw_size) return fmt::format("decompressed to {} bytes, header says {}", r, h.raw_size);
    raw = reinterpret_cast<const unsigned char*>(buf_.data());
  } else if ((reinterpret_cast<uintptr_t>(payload) & 7) != 0 && h.raw_size) {
    std::memcpy(buf_.data(), payload, h.raw_size);
    raw = reinterpret_cast<const unsigned char*>(buf_.data());
  }

  size_t s = 0;
  const size_t defs_begin = new_defs ? new_defs->size() : 0;
  for (uint32_t i = 0; i < h.string_count; ++i) {
    if (s + 8 > h.strings_size) return fmt::format("string table overruns its {} bytes", h.strings_size);
    uint32_t id, len;
    std::memcpy(&id, raw + s, 4);
    std::memcpy(&len, raw + s + 4, 4);
    if (len > h.strings_size - s - 8) return fmt::format("string {} of length {} overruns the string table", id, len);
    if (id > (1u << 20)) return fmt::format("string id {} is implausibly large", id);
    if (id >= strings.size()) strings.resize(size_t(id) + 1);
    strings[id].assign(reinterpret_cast<const char*>(raw + s + 8), len);
    if (new_defs) new_defs->push_back({id, {}});
    s += 8 + len;
  }
  // Views only once `strings` has stopped growing (growth moves short strings).
  if (new_defs)
    for (size_t i = defs_begin; i < new_defs->size(); ++i) (*new_defs)[i].text = strings[(*new_defs)[i].id];
  events = reinterpret_cast<const Event*>(raw + h.strings_size);
  count = h.event_count;
  return {};
}

}  // namespace memcomm::prof
