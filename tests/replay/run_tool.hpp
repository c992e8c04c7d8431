// Running memcomm-replay as a user does, from the tests: a temporary folder for inputs and outputs,
// and the exit code, stdout and stderr of one run, kept apart.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "memcomm_test.hpp"

namespace memcomm::test {

struct ToolRun {
  int code = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TempDir {
 public:
  explicit TempDir(const std::string& tag = "cli")
      : path_(std::filesystem::temp_directory_path() / ("memcomm-replay-" + tag + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path file(const std::string& name, const std::vector<std::uint8_t>& bytes) const {
    std::filesystem::path p = path_ / name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs build/bin/TOOL ARGS with stdout and stderr captured separately.
inline ToolRun run_tool(const TempDir& dir, const std::string& tool, const std::string& args) {
  const std::filesystem::path out = dir.path() / "stdout.txt", err = dir.path() / "stderr.txt";
  std::string cmd = bin_dir() + "/" + tool + " " + args + " >" + out.string() + " 2>" + err.string();
  int status = std::system(cmd.c_str());
  ToolRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// Runs build/bin/memcomm-replay ARGS.
inline ToolRun run_replay(const TempDir& dir, const std::string& args) { return run_tool(dir, "memcomm-replay", args); }

}  // namespace memcomm::test
