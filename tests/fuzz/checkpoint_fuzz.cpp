// Fuzzing memcomm-train's checkpoint file around LibTorch's archive (--resume reads it): the header
// (either version, or none), the length and checksum it gives, and the configuration fingerprint's
// text, which a bare archive (no header) reaches with any bytes. Every input must parse or throw
// std::runtime_error; what it gives must hold together.
#include "checkpoint_file.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace memcomm::train;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const CheckpointHeader h = parse_checkpoint_header("fuzz", bytes);
    const std::string_view archive = checkpoint_archive("fuzz", bytes, h);
    if (archive.size() + h.bytes != bytes.size()) __builtin_trap();
    // The archive's text stands in for the fingerprint string stored in it.
    const Fingerprint f = decode_fingerprint(std::string(archive));
    if (decode_fingerprint(encode_fingerprint(f)) != f) __builtin_trap();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
