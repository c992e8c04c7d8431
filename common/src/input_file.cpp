// See Note [Inputs are regular files] (memcomm/common/input_file.hpp).
#include "memcomm/common/input_file.hpp"

#include <sys/stat.h>

namespace memcomm {

std::string input_file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "is a folder, not a file";
  return "not a regular file (a pipe, a socket or a device): give the file itself";
}

}  // namespace memcomm
