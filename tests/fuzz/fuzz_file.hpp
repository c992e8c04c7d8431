// For fuzz targets whose parser takes a path (the .mct and snapshot readers open files): the input
// bytes as an anonymous in-memory file, named /proc/self/fd/N. No disk writes, nothing to clean
// up between runs, and each input replaces the last.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace memcomm_fuzz {

inline std::string as_file(const std::uint8_t* data, std::size_t size) {
  static const int fd = memfd_create("fuzz-input", 0);
  if (fd < 0) std::abort();
  if (ftruncate(fd, 0) != 0) std::abort();
  std::size_t off = 0;
  while (off < size) {
    const ssize_t n = pwrite(fd, data + off, size - off, static_cast<off_t>(off));
    if (n <= 0) std::abort();
    off += static_cast<std::size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace memcomm_fuzz
