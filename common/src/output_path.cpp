#include "memcomm/common/output_path.hpp"

#include <cstdlib>
#include <unistd.h>

namespace memcomm {

std::filesystem::path parent_folder(const std::string& file) {
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

std::string name_length_problem(const std::string& file) {
  const std::string name = std::filesystem::path(file).filename().string();
  const long limit = ::pathconf(parent_folder(file).c_str(), _PC_NAME_MAX);
  const std::size_t most = limit > 0 ? static_cast<std::size_t>(limit) : 255;
  if (name.size() <= most) return "";
  return "the file name is " + std::to_string(name.size()) + " bytes long, more than the " + std::to_string(most) +
         " its file system allows";
}

bool can_create_in(const std::filesystem::path& dir) {
  std::string probe = (dir / ".memcomm-write-test.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return false;
  ::close(fd);
  ::unlink(probe.c_str());
  return true;
}

std::string output_conflict(const std::string& out, const std::vector<std::string>& inputs, bool refuse_existing) {
  std::error_code ec;
  if (!std::filesystem::exists(out, ec)) return "";
  if (std::filesystem::is_directory(out, ec)) return "output " + out + " is a folder; name a file";
  for (const std::string& in : inputs)
    if (std::filesystem::equivalent(out, in, ec))
      return "output " + out + " is also an input; it would be overwritten (did you forget OUT?)";
  if (refuse_existing) return "output " + out + " already exists; pass --force to overwrite it (or did you forget OUT?)";
  return "";
}

}  // namespace memcomm
