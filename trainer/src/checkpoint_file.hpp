// The bytes of a checkpoint file around LibTorch's archive: the header that guards it (Note
// [Checkpoint checksum] in checkpoint_file.cpp) and the configuration fingerprint stored in it (Note
// [Checkpoint fingerprint] in checkpoint.hpp). LibTorch-free, so the fuzz build reads them too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memcomm::train {

// Flag and value pairs, in the order checkpoint_fingerprint() gives them.
using Fingerprint = std::vector<std::pair<std::string, std::string>>;

// The bytes of the newest header, the space write_checkpoint keeps ahead of the archive.
inline constexpr size_t kCheckpointHeaderBytes = 8 + 4 * sizeof(uint64_t);

// What a header says: the archive's length and trace_hash, and (version 2) the step and the rank.
struct CheckpointHeader {
  size_t bytes = 0;  // of the header itself; 0 for a bare archive
  uint64_t size = 0, hash = 0;
  int64_t step = -1, rank = -1;  // -1: not recorded (version 1)
};

// The newest header for an archive of `size` bytes whose trace_hash is `hash`.
std::string checkpoint_header(uint64_t size, uint64_t hash, int64_t step, int rank);

// The header at the start of `bytes` (the file's first kCheckpointHeaderBytes or more); a bare
// archive has none. Throws std::runtime_error naming `path` when a header is cut short.
CheckpointHeader parse_checkpoint_header(const std::string& path, std::string_view bytes);

// Where the archive lies in checkpoint `path`'s bytes; throws std::runtime_error when its header
// disagrees (length or checksum).
std::string_view checkpoint_archive(const std::string& path, std::string_view bytes, const CheckpointHeader& h);

// "key=value" lines; values never hold a newline (they are flag values and numbers).
std::string encode_fingerprint(const Fingerprint& f);
Fingerprint decode_fingerprint(const std::string& text);

}  // namespace memcomm::train
