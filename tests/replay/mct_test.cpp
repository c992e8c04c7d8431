// memcomm's own .mct traces: written with the profiler's TraceWriter, read back by load_trace,
// with pre-trace blocks, several devices and segment events.
#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "memcomm/trace/event.hpp"
#include "json_text.hpp"
#include "memcomm/trace/trace_writer.hpp"
#include "memcomm/replay/replayer.hpp"
#include "memcomm_test.hpp"
#include "run_tool.hpp"

namespace fs = std::filesystem;
namespace prof = memcomm::prof;
namespace rp = memcomm::replay;

using memcomm::test::MiB;

namespace {

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

TEST_CASE("mct: our own traces become request sequences, per rank and device", "[mct]") {
  fs::path dir = fs::temp_directory_path() / ("memcomm-replay-mct-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string file = write_trace(dir / "run.mct");
  rp::TraceRequests trace = rp::load_trace(file);
  CHECK(trace.format == "mct");
  REQUIRE(trace.devices.size() == 2);
  const auto& d0 = trace.devices[0];
  CHECK(d0.rank == 0);
  CHECK(d0.device == 0);
  CHECK(d0.preexisting_blocks == 1);
  CHECK(d0.preexisting_bytes == 4096);
  CHECK(d0.peak_live == 8 * MiB + 3000);  // the pre-trace block is freed before step 0 allocates
  CHECK(d0.trace_ooms == 1);
  CHECK(d0.anomalies == 0);
  CHECK(d0.recorded.starts_empty());
  CHECK(d0.recorded.peak == 20 * MiB);
  // The pre-trace block, then three steps of two allocations and their frees (Step ranges are not requests).
  CHECK(d0.requests.size() == 2 + 3 * 4);
  CHECK(d0.trace_events == 2 + 3 * 5 + 1);  // segment, pre-trace free, per step 2 allocs + 3 frees, the OOM
  const auto& d1 = trace.devices[1];
  CHECK(d1.rank == 0);
  CHECK(d1.device == 1);
  CHECK(trace.recovery.empty());  // a complete file
  CHECK(d1.peak_live == 1 * MiB);
  CHECK(d1.requests.size() == 2 * 2);  // steps 1 and 2: one allocation and its free each

  // Every policy replays it.
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

namespace {

// Rank 3's allocator with an expandable segment on device 1 (a 128 GiB virtual range, backed 2 MiB at
// a time) next to a plain 20 MiB segment, and host memory (device 255) beside it. Two chunks.
std::string write_expandable_trace(const fs::path& path) {
  prof::WriterOptions o;
  o.rank = 3;
  o.world_size = 4;
  prof::TraceWriter w(path.string(), o);
  constexpr std::uint64_t kVirtual = std::uint64_t{1} << 40, kPlain = std::uint64_t{1} << 30;
  std::int64_t t = 0;
  std::vector<prof::Event> first = {
      mem(prof::EventKind::SegmentAlloc, ++t, kPlain, 20 * MiB, 1),
      mem(prof::EventKind::SegmentAlloc, ++t, kVirtual, std::uint64_t{128} << 30, 1),  // a reservation only
      mem(prof::EventKind::SegmentMap, ++t, kVirtual, 2 * MiB, 1),
      mem(prof::EventKind::Alloc, ++t, kVirtual, 2 * MiB, 1),
      mem(prof::EventKind::SegmentMap, ++t, kVirtual + 2 * MiB, 2 * MiB, 1),
      mem(prof::EventKind::Alloc, ++t, kVirtual + 2 * MiB, 1 * MiB, 1),
      mem(prof::EventKind::Alloc, ++t, kPlain, 10 * MiB, 1),
      mem(prof::EventKind::Alloc, ++t, 4096, 512, prof::kHostDevice),
  };
  w.write_chunk(std::vector<prof::StringDef>{}, first);
  std::vector<prof::Event> second = {
      mem(prof::EventKind::FreeCompleted, ++t, kVirtual + 2 * MiB, 1 * MiB, 1),
      mem(prof::EventKind::SegmentUnmap, ++t, kVirtual + 2 * MiB, 2 * MiB, 1),
      mem(prof::EventKind::FreeCompleted, ++t, kVirtual, 2 * MiB, 1),
      mem(prof::EventKind::SegmentUnmap, ++t, kVirtual, 2 * MiB, 1),
      mem(prof::EventKind::SegmentFree, ++t, kVirtual, std::uint64_t{128} << 30, 1),
  };
  w.write_chunk(std::vector<prof::StringDef>{}, second);
  w.close();
  return path.string();
}

}  // namespace

TEST_CASE("mct: reserved bytes are mapped bytes, not an expandable segment's virtual range", "[mct][reserved]") {
  memcomm::test::TempDir dir("mct");
  rp::TraceRequests trace = rp::load_trace(write_expandable_trace(dir.path() / "x.rank3.mct"));
  REQUIRE(trace.devices.size() == 2);
  const auto& d = trace.devices[0];
  CHECK(d.rank == 3);
  CHECK(d.device == 1);
  CHECK(d.peak_live == 13 * MiB);
  // See Note [Reserved bytes of expandable segments]: the plain segment counts whole, the virtual range
  // only as far as it is mapped; the reservation and its release are no source calls.
  CHECK(d.recorded.peak == 20 * MiB + 4 * MiB);
  CHECK(d.recorded.source_allocs == 3);  // the plain segment + 2 maps
  CHECK(d.recorded.source_frees == 2);   // 2 unmaps
  CHECK(d.recorded.expandable);
  CHECK(d.recorded.starts_empty());
  rp::ReplayResult rec = rp::recorded_result(trace, d);
  CHECK(rec.reserved_over_live() == Approx(24.0 / 13.0));
  CHECK(rec.rank == 3);
  CHECK(rec.device == 1);
  const auto& host = trace.devices[1];
  CHECK(host.rank == 3);
  CHECK(host.device == int{prof::kHostDevice});
}

TEST_CASE("mct: a flagged virtual range counts for nothing even when no map lands in it", "[mct][reserved]") {
  // Without the flag, a reservation that is never mapped (a run that stops first, a map that fails)
  // would be taken for a 128 GiB plain segment (Note [Reserved bytes of expandable segments]).
  memcomm::test::TempDir dir("mct");
  const fs::path path = dir.path() / "v.mct";
  {
    prof::TraceWriter w(path.string(), prof::WriterOptions{});
    auto reservation = prof::make_mem_block(prof::EventKind::SegmentAlloc, 1, std::uint64_t{1} << 40,
                                            std::uint64_t{128} << 30);
    reservation.category = prof::kSegmentVirtualRange;
    REQUIRE(reservation.virtual_range());
    std::vector<prof::Event> events = {mem(prof::EventKind::SegmentAlloc, 2, std::uint64_t{1} << 30, 20 * MiB),
                                       prof::Event::from(reservation),
                                       mem(prof::EventKind::Alloc, 3, std::uint64_t{1} << 30, 4 * MiB)};
    w.write_chunk(std::vector<prof::StringDef>{}, events);
    w.close();
  }
  rp::TraceRequests trace = rp::load_trace(path.string());
  REQUIRE(trace.devices.size() == 1);
  CHECK(trace.devices[0].recorded.peak == 20 * MiB);
  CHECK(trace.devices[0].recorded.source_allocs == 1);
}

TEST_CASE("mct: the CLI reports rank and device apart, and whose allocator `recorded` is", "[mct][cli]") {
  memcomm::test::TempDir dir("mct-cli");
  const std::string file = write_expandable_trace(dir.path() / "x.rank3.mct");
  memcomm::test::ToolRun r = memcomm::test::run_replay(dir, file + " --policy recorded,pytorch --json -");
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto list = memcomm::test::parse_json(r.out);
  REQUIRE(list.size() == 2 * 2);  // (rank 3, device 1) and (rank 3, host) x 2 policies
  CHECK(list[0]["rank"] == 3);
  CHECK(list[0]["device"] == 1);
  CHECK(list[0]["format"] == "mct");
  CHECK(list[0]["policy"] == "recorded");
  CHECK(list[0]["peak_reserved"] == 24 * MiB);
  CHECK(list[2]["rank"] == 3);
  CHECK(list[2]["device"] == int{prof::kHostDevice});
  // The table (on stderr with --json -): a rank column, host memory named, and `recorded` described
  // as memcomm's own allocator, not PyTorch's.
  CHECK(r.err.find("rank") != std::string::npos);
  CHECK(r.err.find("   3     1  recorded*") != std::string::npos);
  CHECK(r.err.find("   3  host  recorded ") != std::string::npos);  // no segment events: not known to start empty
  CHECK(r.err.find("recorded (.mct traces) = what memcomm's own allocator did") != std::string::npos);
  CHECK(r.err.find("PyTorch") == std::string::npos);
}

TEST_CASE("mct: a trace without allocator events is nothing to replay (exit 2), as a profile without [memory] events", "[mct]") {
  memcomm::test::TempDir dir("mct-no-alloc");
  const fs::path file = dir.path() / "torch-allocator.mct";  // memcomm-train --allocator torch records phases only
  {
    prof::TraceWriter w(file.string(), prof::WriterOptions{});
    const std::vector<prof::Event> ev = {
        prof::Event::from(prof::make_range(prof::EventKind::RangeBegin, 1, prof::Phase::Step, 0, 0, 0)),
        prof::Event::from(prof::make_range(prof::EventKind::RangeEnd, 2, prof::Phase::Step, 0, 0, 0))};
    w.write_chunk(std::vector<prof::StringDef>{}, ev);
    w.close();
  }
  const memcomm::test::ToolRun r = memcomm::test::run_replay(dir, file.string());
  CHECK(r.code == 2);
  CHECK(r.err.find("torch-allocator.mct: a memcomm trace without allocator events: nothing to replay") !=
        std::string::npos);
}

TEST_CASE("mct: a truncated trace is replayed up to its last complete chunk, with a warning", "[mct][recovery]") {
  memcomm::test::TempDir dir("mct-cut");
  const fs::path file = write_expandable_trace(dir.path() / "cut.mct");
  fs::resize_file(file, fs::file_size(file) - 10);  // the second chunk loses its tail
  rp::TraceRequests trace = rp::load_trace(file.string());
  CHECK(trace.recovery.find("chunk 1") != std::string::npos);
  CHECK(trace.recovery.find("recovered 1 complete chunks, 8 events") != std::string::npos);
  CHECK(trace.recovery.find("trailing bytes ignored") != std::string::npos);
  REQUIRE_FALSE(trace.devices.empty());
  CHECK(trace.devices[0].trace_events == 7);  // the first chunk's device-1 events

  memcomm::test::ToolRun r = memcomm::test::run_replay(dir, file.string() + " --policy recorded");
  CHECK(r.code == 0);
  CHECK(r.err.find("memcomm-replay: warning: " + file.string() + ": chunk 1") != std::string::npos);
  CHECK(r.err.find("trailing bytes ignored") != std::string::npos);
  CHECK(r.out.find("cut.mct") != std::string::npos);

  const fs::path whole = write_expandable_trace(dir.path() / "whole.mct");
  r = memcomm::test::run_replay(dir, whole.string() + " --policy recorded");
  CHECK(r.code == 0);
  CHECK(r.err.find("warning") == std::string::npos);
}

TEST_CASE("mct: the memcomm policy rounds host memory's blocks as memcomm's CPU allocator does, a device's as CUDA's",
          "[mct]") {
  // See Note [Rounding follows the memory]: host traces replayed at a device's 512 B gave the CPU run's
  // fragmentation and advice from blocks 8 x a scalar's.
  for (const int device : {int(prof::kHostDevice), 0}) {
    INFO("device " << device);
    rp::PolicyOptions po;
    po.device = device;
    auto p = rp::make_policy("memcomm", po);
    REQUIRE(p->allocate(4, 0));
    CHECK(p->stats().allocated == (device == prof::kHostDevice ? 64u : 512u));
  }
}
