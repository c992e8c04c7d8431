// IDX files (the MNIST family's format), gzipped or plain, read without LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memcomm::train {

struct IdxArray {
  std::vector<int64_t> dims;   // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<uint8_t> data;   // unsigned bytes, row-major
};

// Reads an unsigned-byte IDX file (magic 0x00000801/0x00000803). Throws std::runtime_error naming
// the file and what is wrong (missing, truncated, wrong magic, size mismatch).
IdxArray read_idx_u8(const std::string& path);

}  // namespace memcomm::train
