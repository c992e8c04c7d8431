// Errors raised while reading outside input (pickles, snapshots): they always name the file and the
// byte offset where reading stopped, so a user can find the broken spot with a hex dump.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace memcomm::snapshot {

// Offset value for errors that concern the file as a whole (e.g. a missing key in the decoded data).
inline constexpr std::uint64_t kNoOffset = ~std::uint64_t{0};

class ReadError : public std::runtime_error {
 public:
  ReadError(std::string file, std::uint64_t offset, const std::string& what)
      : std::runtime_error(format(file, offset, what)), file_(std::move(file)), offset_(offset) {}

  const std::string& file() const noexcept { return file_; }
  // Byte offset of the opcode (or structure) that could not be read; kNoOffset when not tied to one.
  std::uint64_t offset() const noexcept { return offset_; }

 private:
  static std::string format(const std::string& file, std::uint64_t offset, const std::string& what) {
    if (offset == kNoOffset) return file + ": " + what;
    return file + ": byte offset " + std::to_string(offset) + ": " + what;
  }
  std::string file_;
  std::uint64_t offset_;
};

}  // namespace memcomm::snapshot
