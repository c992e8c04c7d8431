#include "progress.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace memcomm::prof::tool {

Progress::Progress(std::string what) : what_(std::move(what)), tty_(::isatty(STDERR_FILENO) != 0) {
  ticker_ = std::thread([this] { run(); });
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  ticker_.join();
  if (printed_) print(true);
}

void Progress::run() {
  std::unique_lock<std::mutex> lock(mu_);
  auto wait = std::chrono::seconds(2);  // quiet for short work, then a line a second
  while (!cv_.wait_for(lock, wait, [this] { return stop_; })) {
    print(false);
    wait = std::chrono::seconds(1);
  }
}

void Progress::print(bool last) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double f = fraction_.load(std::memory_order_relaxed);
  std::string line = fmt::format("memcomm-trace: {}", what_);
  if (last) line += fmt::format(": done in {:.1f} s", s);
  else if (f >= 0) line += fmt::format(": {:.0f}%, {:.0f} s", 100 * std::min(f, 1.0), s);
  else line += fmt::format("... {:.0f} s", s);
  std::fprintf(stderr, tty_ ? "\r%s\033[K%s" : "%s%s", line.c_str(), tty_ && !last ? "" : "\n");
  std::fflush(stderr);
  printed_ = true;
}

}  // namespace memcomm::prof::tool
