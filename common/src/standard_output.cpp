// See Note [Output that was not written] in standard_output.hpp.
#include "memcomm/common/standard_output.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <sys/stat.h>
#include <unistd.h>

namespace memcomm {

int stdout_checked(int code, const char* tool) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout)) return code;
  std::fprintf(stderr, "%s: standard output could not be written (%s): what it printed there is lost\n", tool,
               !flushed && err != 0 ? std::strerror(err) : "a write failed");
  return code == 0 ? 1 : code;
}

bool is_standard_output(const std::string& path) {
  if (path == "-") return true;
  struct stat out {}, named {};
  if (::fstat(STDOUT_FILENO, &out) != 0 || ::stat(path.c_str(), &named) != 0) return false;
  return out.st_dev == named.st_dev && out.st_ino == named.st_ino;
}

}  // namespace memcomm
