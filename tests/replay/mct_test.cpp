// memcomm's own .mct traces: written with the profiler's TraceWriter, read back by load_trace,
// with step markers for planned policies, pre-trace blocks, several devices and segment events.
#include <unistd.h>

#include <filesystem>

#include "memcomm/profiler/event.hpp"
#include "memcomm/profiler/trace_writer.hpp"
#include "memcomm/replay/replayer.hpp"
#include "memcomm_test.hpp"

namespace fs = std::filesystem;
namespace prof = memcomm::prof;
namespace rp = memcomm::replay;

namespace {

constexpr std::uint64_t MiB = 1u << 20;

prof::Event mem(prof::EventKind k, std::int64_t ts, std::uint64_t addr, std::uint64_t size, std::uint8_t device = 0) {
  return prof::Event::from(prof::make_mem_block(k, ts, addr, size, device));
}

// Three training steps on device 0; device 1 joins in step 2. Device 0 also frees one block that
// was allocated before recording started, and one allocation fails.
std::string write_trace(const fs::path& path) {
  prof::WriterOptions o;
  o.rank = 0;
  prof::TraceWriter w(path.string(), o);
  std::vector<prof::Event> ev;
  std::int64_t t = 0;
  ev.push_back(mem(prof::EventKind::SegmentAlloc, ++t, 1u << 30, 20 * MiB));
  ev.push_back(mem(prof::EventKind::FreeCompleted, ++t, 7 * MiB, 4096));  // predates the recording
  for (int step = 0; step < 3; ++step) {
    ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeBegin, ++t, prof::Phase::Step, 0, step, 0)));
    ev.push_back(mem(prof::EventKind::Alloc, ++t, 1u << 30, 8 * MiB));
    ev.push_back(mem(prof::EventKind::Alloc, ++t, (1u << 30) + 8 * MiB, 3000));
    if (step >= 1) ev.push_back(mem(prof::EventKind::Alloc, ++t, 5 * MiB, 1 * MiB, 1));
    ev.push_back(mem(prof::EventKind::FreeRequested, ++t, 1u << 30, 8 * MiB));
    ev.push_back(mem(prof::EventKind::FreeCompleted, ++t, 1u << 30, 8 * MiB));
    ev.push_back(mem(prof::EventKind::FreeCompleted, ++t, (1u << 30) + 8 * MiB, 3000));
    if (step >= 1) ev.push_back(mem(prof::EventKind::FreeCompleted, ++t, 5 * MiB, 1 * MiB, 1));
    ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeEnd, ++t, prof::Phase::Step, 0, step, 0)));
  }
  prof::OomEvent oom{};
  oom.ts = ++t;
  oom.kind = prof::EventKind::Oom;
  oom.requested = 1u << 30;
  ev.push_back(prof::Event::from(oom));
  w.write_chunk(std::vector<prof::StringDef>{}, ev);
  w.close();
  return path.string();
}

}  // namespace

TEST_CASE("mct: our own traces become request sequences with step markers", "[mct]") {
  fs::path dir = fs::temp_directory_path() / ("memcomm-replay-mct-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string file = write_trace(dir / "run.mct");
  rp::TraceRequests trace = rp::load_trace(file);
  CHECK(trace.format == "mct");
  REQUIRE(trace.devices.size() == 2);
  const auto& d0 = trace.devices[0];
  CHECK(d0.device == 0);
  CHECK(d0.preexisting_blocks == 1);
  CHECK(d0.preexisting_bytes == 4096);
  CHECK(d0.peak_live == 8 * MiB + 3000);  // the pre-trace block is freed before step 0 allocates
  CHECK(d0.trace_ooms == 1);
  CHECK(d0.anomalies == 0);
  CHECK(d0.recorded.starts_empty());
  CHECK(d0.recorded.peak == 20 * MiB);
  std::size_t steps = 0;
  for (const auto& r : d0.requests) steps += r.op == rp::Request::Op::step;
  CHECK(steps == 3);
  const auto& d1 = trace.devices[1];
  CHECK(d1.device == 1);
  CHECK(d1.peak_live == 1 * MiB);
  steps = 0;
  for (const auto& r : d1.requests) steps += r.op == rp::Request::Op::step;
  CHECK(steps == 1);  // device 1 first appeared inside step 1, so only step 2's marker reaches it

  // Every policy replays it, planned ones with the step markers.
  rp::ReplayOptions ro;
  ro.check = true;
  for (const auto& r : rp::replay_all(trace, rp::policy_names(), 0, ro)) {
    INFO(r.policy << " device " << r.device);
    CHECK(r.ooms == 0);
    CHECK(r.peak_reserved >= r.peak_live);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}
