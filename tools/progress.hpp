// Progress of memcomm-trace's long stages on stderr: reading the inputs, exporting, analysing. Work
// that ends within 2 s prints nothing; past that, a line a second says what is being done,
// how far (when the stage knows) and for how long, rewritten in place on a terminal.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace memcomm::prof::tool {

class Progress {
 public:
  explicit Progress(std::string what);  // "reading 2 files (218 MB)"
  ~Progress();                          // the last line says how long it took, if any was printed
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(double fraction) { fraction_.store(fraction, std::memory_order_relaxed); }  // 0..1; any thread

 private:
  void run();
  void print(bool last);

  std::string what_;
  const bool tty_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::atomic<double> fraction_{-1.0};  // < 0: the stage does not know how far it is
  bool printed_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread ticker_;
};

}  // namespace memcomm::prof::tool
