// Fuzzing memcomm-train's IDX reader (the Fashion-MNIST files): header, dimension products and data
// length, then the Fashion-MNIST shape checks, over arbitrary bytes. Every input must either parse
// or throw std::runtime_error; nothing else (no crash, no huge allocation, no other exception).
#include "idx_file.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace memcomm::train;
  // The first byte splits the input into an "images" and a "labels" file, so that
  // check_fashion_mnist sees pairs of arrays too.
  const size_t split = size == 0 ? 0 : 1 + (data[0] * (size - 1)) / 256;
  try {
    const IdxArray whole = parse_idx_u8(data, size, "fuzz");
    if (static_cast<int64_t>(whole.data.size()) > kMaxIdxElements) __builtin_trap();
  } catch (const std::runtime_error&) {
  }
  try {
    const IdxArray images = parse_idx_u8(data + (size == 0 ? 0 : 1), split == 0 ? 0 : split - 1, "images");
    const IdxArray labels = parse_idx_u8(data + split, size - split, "labels");
    check_fashion_mnist(images, "images", labels, "labels");
  } catch (const std::runtime_error&) {
  }
  return 0;
}
