// Runs memcomm-train (or any command) from a test and captures what it printed.
#pragma once

#include "json_text.hpp"
#include "memcomm_test.hpp"

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <array>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace memcomm::test {

struct RunResult {
  int code = -1;        // exit code, or 128+signal
  std::string output;   // stdout and stderr together
};

inline RunResult run_command(const std::string& cmd) {
  RunResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline std::string train_bin() { return bin_dir() + "/memcomm-train"; }

// A fast, deterministic configuration: the MLP on the synthetic tabular set, one thread per rank.
inline std::string quick_train(const std::string& extra) {
  return train_bin() + " --model mlp --dataset tabular --synthetic-size 4096 --hidden 64 --threads 1 "
                       "--workers 1 --log-interval 1000 --eval-batches 2 " + extra;
}

// A fresh scratch folder under the build tree for one test.
inline std::string scratch_dir(const std::string& name) {
  const auto d = std::filesystem::path(MEMCOMM_BINARY_DIR) / "test-scratch" / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// "checksum step S rank R HEX" lines -> checksums[S][R].
inline std::map<int, std::map<int, std::string>> parse_checksums(const std::string& out) {
  std::map<int, std::map<int, std::string>> m;
  std::regex re(R"(checksum step (\d+) rank (\d+) ([0-9a-f]+))");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
    m[std::stoi((*it)[1])][std::stoi((*it)[2])] = (*it)[3];
  return m;
}

inline std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), {});
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// ||a - b|| / ||b||
inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace memcomm::test
