// The snapshot files a replay benchmark runs on: its arguments (files, or folders whose .pickle
// files are taken), else the shared real snapshots; sorted, so reports list traces in one order.
// -h/--help prints USAGE and exits 0; an unknown flag, a missing path or no snapshot at all exits 2.
#pragma once

#include "memcomm/common/standard_output.hpp"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

inline std::vector<std::string> snapshot_files(std::vector<std::string> args, const char* usage) {
  namespace fs = std::filesystem;
  if (args.empty()) args.push_back(std::string(MEMCOMM_SOURCE_DIR) + "/../shared/traces/pytorch-snapshots");
  std::vector<std::string> files;
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") {
      std::printf("usage: %s\n", usage);
      std::exit(0);
    }
    std::error_code ec;
    if (a.rfind("-", 0) == 0 || !fs::exists(a, ec)) {
      std::fprintf(stderr, "%s: %s\nusage: %s\n", a.c_str(),
                   a.rfind("-", 0) == 0 ? "unknown option" : "no such file or folder", usage);
      std::exit(2);
    }
    if (fs::is_directory(a, ec)) {
      for (const auto& e : fs::directory_iterator(a))
        if (e.path().extension() == ".pickle") files.push_back(e.path().string());
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "no .pickle snapshots in %s\nusage: %s\n", args.front().c_str(), usage);
    std::exit(2);
  }
  std::sort(files.begin(), files.end());
  return files;
}

inline std::vector<std::string> snapshot_files(int argc, char** argv, const char* usage) {
  return snapshot_files(std::vector<std::string>(argv + 1, argv + argc), usage);
}

// Runs a benchmark's body, turning an unreadable snapshot (or any other error) into a message and
// exit code 1 instead of an uncaught exception, and a report standard output did not take into exit
// code 1 too (Note [Output that was not written]).
inline int run_reporting_errors(const char* tool, const std::function<int()>& body) {
  int code = 1;
  try {
    code = body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
  }
  return memcomm::stdout_checked(code, tool);
}
