// See Note [Inputs are regular files] (memcomm/common/input_file.hpp).
#include "memcomm/common/input_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace memcomm {

std::string input_file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "is a folder, not a file";
  return "not a regular file (a pipe, a socket or a device): give the file itself";
}

bool read_file_head(const std::string& path, std::size_t n, std::string& head, std::string& error) {
  head.clear();
  if (error = input_file_problem(path); !error.empty()) return false;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    error = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  head.resize(n);
  head.resize(std::fread(head.data(), 1, n, f));
  const int read_errno = std::ferror(f) ? (errno != 0 ? errno : EIO) : 0;
  std::fclose(f);
  if (read_errno != 0) error = std::string("cannot read: ") + std::strerror(read_errno);
  return read_errno == 0;
}

}  // namespace memcomm
