#include "memcomm/common/output_path.hpp"

#include <cstdlib>
#include <unistd.h>

namespace memcomm {

std::filesystem::path parent_folder(const std::string& file) {
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

bool can_create_in(const std::filesystem::path& dir) {
  std::string probe = (dir / ".memcomm-write-test.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return false;
  ::close(fd);
  ::unlink(probe.c_str());
  return true;
}

}  // namespace memcomm
