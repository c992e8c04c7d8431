// torch.profiler memory profiles (profile_memory=True): their [memory] events replayed like a
// snapshot's, with the bytes live before the trace (Note [Replaying a torch.profiler memory
// profile]); a trace without [memory] events is an input error. The real df_index_resolver trace
// (28,010 [memory] events) skips without ../shared.
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "json_text.hpp"
#include "kineto_fixture.hpp"
#include "memcomm/replay/replayer.hpp"
#include "memcomm_test.hpp"
#include "run_tool.hpp"

namespace fs = std::filesystem;
namespace rp = memcomm::replay;

namespace {

fs::path write_json(const memcomm::test::TempDir& dir, const std::string& name, const std::string& text) {
  const fs::path p = dir.path() / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

const rp::ReplayResult& result_of(const std::vector<rp::ReplayResult>& results, const std::string& policy) {
  for (const auto& r : results)
    if (r.policy == policy) return r;
  FAIL("no result for " << policy);
  return results.front();
}

}  // namespace

TEST_CASE("kineto: a memory profile becomes requests, and peak live is the largest Total Allocated", "[kineto]") {
  memcomm::test::TempDir dir("kineto");
  const auto fx = memcomm::test::kineto_fixture(1, 5, true);
  const fs::path path = write_json(dir, "rank1.pt.trace.json", fx.json);
  const rp::TraceRequests t = rp::load_trace(path.string());
  CHECK(t.format == "torch-profiler");
  CHECK(t.recovery.empty());
  REQUIRE(t.devices.size() == 1);
  const rp::DeviceRequests& d = t.devices[0];
  CHECK(d.rank == 1);
  CHECK(d.device == 0);
  CHECK(d.trace_events == fx.memory_events);
  CHECK(d.anomalies == 0);
  // The 512-byte block freed first, and the 4096 bytes live throughout (one block, never freed).
  CHECK(d.preexisting_blocks == 2);
  CHECK(d.preexisting_bytes == 4096 + 512);
  CHECK(d.peak_live == fx.max_allocated);
  REQUIRE(t.notes.size() == 1);
  CHECK(t.notes[0].find("device 0: 4.0 KiB live before the first [memory] event") != std::string::npos);
  CHECK(t.notes[0].find("= the trace's largest Total Allocated") != std::string::npos);
  // `recorded` is Total Reserved: its peak, and one source call per rise.
  CHECK(d.recorded.known);
  CHECK(d.recorded.peak == fx.max_reserved);
  CHECK(d.recorded.source_allocs > 0);

  rp::ReplayOptions check;
  check.check = true;
  const auto results = rp::replay_all(t, {rp::kRecordedPolicy, "pytorch", "pytorch-expandable", "memcomm"}, 0, check);
  REQUIRE(results.size() == 4);
  for (const auto& r : results) {
    INFO(r.policy);
    CHECK(r.peak_live == fx.max_allocated);
    CHECK(r.peak_reserved >= r.peak_live);
    CHECK(r.rank == 1);
  }
  CHECK(result_of(results, rp::kRecordedPolicy).peak_reserved == fx.max_reserved);
}

TEST_CASE("kineto: a memory profile converted to .mct replays as the profile itself", "[kineto][cli]") {
  memcomm::test::TempDir dir("kineto-convert");
  const auto fx = memcomm::test::kineto_fixture(1, 5, true);
  const fs::path json = write_json(dir, "rank1.pt.trace.json", fx.json);
  const fs::path mct = dir.path() / "rank1.mct";
  const auto conv = memcomm::test::run_tool(dir, "memcomm-trace", "convert " + json.string() + " " + mct.string());
  INFO(conv.err);
  REQUIRE(conv.code == 0);
  const rp::TraceRequests from_json = rp::load_trace(json.string());
  const rp::TraceRequests from_mct = rp::load_trace(mct.string());
  CHECK(from_mct.format == "mct");
  REQUIRE(from_mct.devices.size() == from_json.devices.size());
  for (size_t i = 0; i < from_json.devices.size(); ++i) {
    const rp::DeviceRequests &a = from_json.devices[i], &b = from_mct.devices[i];
    CHECK(b.rank == a.rank);
    CHECK(b.device == a.device);
    CHECK(b.preexisting_bytes == a.preexisting_bytes);  // the bytes allocated before the profile
    CHECK(b.peak_live == a.peak_live);
    CHECK(b.recorded.known);
    CHECK(b.recorded.peak == a.recorded.peak);  // Total Reserved
    CHECK(b.recorded_from_profile);
  }
  CHECK(from_mct.notes == from_json.notes);
  // The table says whose `recorded` that is: PyTorch's Total Reserved, not memcomm's allocator.
  const auto table = memcomm::test::run_replay(dir, mct.string() + " --policy recorded");
  INFO(table.out);
  CHECK(table.out.find("recorded (torch.profiler traces, and .mct converted from one)") != std::string::npos);
  CHECK(table.out.find("memcomm's own allocator") == std::string::npos);
}

TEST_CASE("kineto: memcomm-replay on a trace without [memory] events exits 2 and says why", "[kineto][cli]") {
  memcomm::test::TempDir dir("kineto-cli");
  const fs::path none = write_json(dir, "compute.json", memcomm::test::kineto_fixture(0, 3, false).json);
  auto r = memcomm::test::run_replay(dir, none.string());
  CHECK(r.code == 2);
  CHECK(r.err.find("without [memory] events") != std::string::npos);
  CHECK(r.err.find("profile_memory=True") != std::string::npos);

  const fs::path other = write_json(dir, "other.json", "{\"a\": 1}");
  r = memcomm::test::run_replay(dir, other.string());
  CHECK(r.code == 2);
  CHECK(r.err.find("not a torch.profiler trace") != std::string::npos);

  // A profile cut short replays what it holds, with a warning; the table names the format's recorded.
  const std::string full = memcomm::test::kineto_fixture(0, 8, true).json;
  const fs::path cut = write_json(dir, "cut.json", full.substr(0, full.size() * 9 / 10));
  r = memcomm::test::run_replay(dir, cut.string() + " --json -");
  CHECK(r.code == 0);
  CHECK(r.err.find("warning: " + cut.string() + ": the file ends early") != std::string::npos);
  CHECK(r.err.find("recorded (torch.profiler traces, and .mct converted from one)") != std::string::npos);
  const auto j = memcomm::test::parse_json(r.out);
  REQUIRE(j.size() == 4);
  CHECK(j[0]["format"] == "torch-profiler");
  CHECK(j[0]["rank"] == 0);
}

TEST_CASE("kineto: live bytes past 2^62 are an input error, not a policy's broken invariant", "[kineto][cli]") {
  // The sums wrapped past 2^64, and pytorch-expandable's invariant failed, exit 1 (see Note [Live bytes past 4 EiB]).
  memcomm::test::TempDir dir("kineto-huge");
  const auto event = [](int ts, std::uint64_t addr, const std::string& bytes, const std::string& total) {
    return "{\"ph\": \"i\", \"name\": \"[memory]\", \"cat\": \"cpu_instant_event\", \"pid\": 1, \"tid\": 1, \"ts\": " +
           std::to_string(ts) + ", \"s\": \"t\", \"args\": {\"Device Type\": 1, \"Device Id\": 0, \"Addr\": " +
           std::to_string(addr) + ", \"Bytes\": " + bytes + ", \"Total Allocated\": " + total + ", \"Total Reserved\": " + total + "}}";
  };
  const std::string big = "9223372036854775807";  // 2^63 - 1
  const fs::path huge = write_json(dir, "huge.json", "{\"traceEvents\": [" + event(1, 4096, big, big) + ", " +
                                                         event(2, 8192, big, "18446744073709551615") + ", " +
                                                         event(3, 4096, "-" + big, "0") + "]}");
  const auto r = memcomm::test::run_replay(dir, "-q --policy pytorch-expandable " + huge.string());
  CHECK(r.code == 2);
  CHECK(r.err.find(huge.string()) != std::string::npos);
  CHECK(r.err.find("live bytes pass 2^62") != std::string::npos);
}

TEST_CASE("kineto: df_index_resolver replays through every policy with a peak live of its Total Allocated",
          "[kineto][shared]") {
  const std::string path = memcomm::test::shared_kineto_dir() + "/df_index_resolver/df_index_resolver.json.gz";
  if (!fs::exists(path)) MEMCOMM_SKIP_TEST("no " + path);
  const rp::TraceRequests t = rp::load_trace(path);
  CHECK(t.format == "torch-profiler");
  REQUIRE(t.devices.size() == 2);  // the GPU (device 1) and host memory
  const rp::DeviceRequests& gpu = t.devices[0];
  CHECK(gpu.device == 1);
  CHECK(gpu.rank == 1);
  CHECK(gpu.trace_events == 26770);  // its [memory] events (the host has the other 1,240)
  CHECK(t.devices[1].device == memcomm::prof::kHostDevice);
  CHECK(t.devices[1].trace_events == 1240);
  CHECK(gpu.anomalies == 0);
  // Total Allocated: 4,096,614,400 bytes before the first event, none of them freed in the trace;
  // its largest value 6,629,508,096; Total Reserved 12,782,141,440 throughout.
  CHECK(gpu.preexisting_bytes == 4096614400u);
  CHECK(gpu.peak_live == 6629508096u);
  CHECK(gpu.recorded.peak == 12782141440u);
  for (const auto& n : t.notes) CHECK(n.find("disagrees") == std::string::npos);

  memcomm::test::TempDir dir("kineto-df");
  const auto r = memcomm::test::run_replay(dir, path + " --check --json -");
  REQUIRE(r.code == 0);
  CHECK(r.err.find("note: " + path + ": device 1: 3.82 GiB live before the first [memory] event") != std::string::npos);
  const auto j = memcomm::test::parse_json(r.out);
  REQUIRE(j.size() == 8);  // 2 devices x 4 policies
  for (const auto& row : j) {
    INFO(row.dump());
    CHECK(row["format"] == "torch-profiler");
    CHECK(row["rank"] == 1);
    CHECK(row["ooms"] == 0);
    if (row["device"] == 1) {
      CHECK(row["peak_live"] == 6629508096u);
      CHECK(row["peak_reserved"].get<std::uint64_t>() >= 6629508096u);
    }
  }
}
