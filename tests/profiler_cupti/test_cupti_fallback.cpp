// CuptiCapture where CUPTI cannot run (this is every machine without a GPU): one warning line,
// start() false, and the recorder goes on recording host events. With a GPU, start/stop round-trips.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "memcomm/profiler/cupti_capture.hpp"
#include "memcomm/profiler/recorder.hpp"
#include "memcomm/profiler/sink.hpp"
#include "memcomm_test.hpp"

using namespace memcomm::prof;

namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Runs fn with stderr redirected to a file; returns what it printed.
template <class Fn>
std::string capture_stderr(Fn fn) {
  char path[] = "/tmp/memcomm_cupti_stderr_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  fn();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  unlink(path);
  return ss.str();
}

}  // namespace

TEST_CASE("without a usable GPU, start() fails with one warning line and host events continue", "[cupti][unit]") {
  Recorder rec;
  auto sink = std::make_shared<MemorySink>();
  rec.add_sink(sink);
  rec.start();
  CuptiCapture cupti;
  bool started = true;
  const std::string err = capture_stderr([&] { started = cupti.start(rec); });

  if (have_gpu()) {  // the GPU machine: the real capture starts and stops cleanly
    CHECK(started);
    CHECK(cupti.running());
    cupti.stop();
    CHECK_FALSE(cupti.running());
  } else {
    CHECK_FALSE(started);
    CHECK_FALSE(cupti.running());
    INFO("stderr: " << err);
    CHECK(err.find("memcomm: CUPTI capture unavailable: ") == 0);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    CHECK_FALSE(cupti.last_error().empty());
    CHECK(err.find(cupti.last_error()) != std::string::npos);
    cupti.stop();  // harmless when not running
  }

  // The recorder is untouched: host events still arrive.
  { PhaseScope step(Phase::Step, 3, {}, rec); }
  rec.record(make_mem_block(EventKind::Alloc, now_ns(), 0x1000, 256));
  rec.stop();
  size_t ranges = 0, allocs = 0;
  for (const Event& e : sink->events()) {
    ranges += e.kind == EventKind::RangeBegin || e.kind == EventKind::RangeEnd;
    allocs += e.kind == EventKind::Alloc;
  }
  CHECK(ranges == 2);
  CHECK(allocs == 1);
  const CuptiStats s = cupti.stats();
  CHECK(s.buffers_denied == 0);
  CHECK(s.lost_recorder_off == 0);
}

TEST_CASE("quiet option suppresses the warning but still reports the reason", "[cupti][unit]") {
  if (have_gpu()) MEMCOMM_SKIP_TEST("a GPU is present: the fallback path cannot be reached");
  Recorder rec;
  CuptiOptions opt;
  opt.quiet = true;
  CuptiCapture cupti(opt);
  bool started = true;
  const std::string err = capture_stderr([&] { started = cupti.start(rec); });
  CHECK_FALSE(started);
  CHECK(err.empty());
  CHECK_FALSE(cupti.last_error().empty());
  // A failed start leaves nothing claimed: another capture may try (and fail the same way).
  CuptiCapture other(opt);
  CHECK_FALSE(other.start(rec));
  CHECK(other.last_error().find("another CuptiCapture") == std::string::npos);
}
