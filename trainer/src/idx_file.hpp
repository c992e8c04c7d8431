// IDX files (the MNIST family's format), gzipped or plain, read without LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace memcomm::train {

struct IdxArray {
  std::vector<int64_t> dims;   // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<uint8_t> data;   // unsigned bytes, row-major
};

// The most elements an IDX array may hold (16 Gi: far above Fashion-MNIST's 47 M); larger headers
// are refused before anything is allocated.
constexpr int64_t kMaxIdxElements = int64_t(1) << 34;

// Reads an unsigned-byte IDX file (magic 0x00000801/0x00000803). Throws std::runtime_error naming
// the file and what is wrong (missing, truncated, wrong magic, size mismatch).
IdxArray read_idx_u8(const std::string& path);

// The same parser over an uncompressed IDX file already in memory (what the fuzzer feeds it);
// `name` stands for the file in messages. Bytes after the data are ignored, as in a file.
IdxArray parse_idx_u8(const uint8_t* bytes, size_t size, const std::string& name);

// The Fashion-MNIST file of `split` ("train" or "test") in `dir`: its images, or its labels.
inline std::string fashion_mnist_path(const std::string& dir, const std::string& split, bool labels) {
  const std::string prefix = split == "train" ? "train" : "t10k";
  return dir + "/" + prefix + (labels ? "-labels-idx1-ubyte.gz" : "-images-idx3-ubyte.gz");
}

// Fashion-MNIST's shape: images N x 28 x 28, labels N, every label below 10, N >= 1. Throws
// std::runtime_error naming the file that is wrong, so a damaged or foreign file is an error at
// load time rather than an index out of range in the loss.
void check_fashion_mnist(const IdxArray& images, const std::string& images_path, const IdxArray& labels,
                         const std::string& labels_path);

}  // namespace memcomm::train
