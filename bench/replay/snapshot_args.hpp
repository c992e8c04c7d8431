// The snapshot files a replay benchmark runs on: its arguments (files, or folders whose .pickle
// files are taken), else the shared real snapshots; sorted, so reports list traces in one order.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

inline std::vector<std::string> snapshot_files(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc), files;
  if (args.empty()) args.push_back(std::string(MEMCOMM_SOURCE_DIR) + "/../shared/traces/pytorch-snapshots");
  for (const auto& a : args) {
    if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::directory_iterator(a))
        if (e.path().extension() == ".pickle") files.push_back(e.path().string());
    } else {
      files.push_back(a);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}
