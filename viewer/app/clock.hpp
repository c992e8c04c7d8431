// Clocks of memcomm-view's app (internal): wall time for timeouts and frame times, and the CPU time
// of the calling thread for the frame-build and live-publish costs.
#pragma once

#include <chrono>
#include <ctime>

namespace memcomm::view {

// Seconds on the steady clock.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of this thread: the frame-build target is CPU time, which preemption by llvmpipe's
// render threads and other processes on a shared machine does not inflate.
inline double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace memcomm::view
