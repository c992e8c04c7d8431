// Chrome export parsed back, and the memcomm-trace tool end to end (info, export, merge, report).
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "json_text.hpp"
#include "memcomm/trace/chrome_export.hpp"
#include "memcomm/trace/trace_format.hpp"
#include "memcomm/trace/trace_set.hpp"
#include "memcomm/trace/trace_writer.hpp"
#include "memcomm_test.hpp"
#include "synthetic_run.hpp"
#include "trace_fixtures.hpp"

using namespace memcomm::prof;

namespace {
// Runs a command, returns its exit code; stdout+stderr go to `out`.
int run(const std::string& cmd, std::string& out) {
  const std::string log = test::temp_path("cmd") + ".log";
  const int st = std::system((cmd + " > " + log + " 2>&1").c_str());
  std::ifstream f(log);
  out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  std::remove(log.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
std::string tool() { return memcomm::test::bin_dir() + "/memcomm-trace"; }

// The synthetic run plus a GPU-ish rank 2 with a launch -> kernel correlation. Its file names no
// world size: the run's is 2, and a world of 3 would be a mix of runs (Note [One run or several]).
// Rank `rank`'s trace at `path`: one chunk of `events`, named by `strings`.
void write_rank(const std::string& path, uint32_t rank, const std::vector<StringDef>& strings,
                const std::vector<Event>& events) {
  WriterOptions o;
  o.rank = rank;
  TraceWriter w(path, o);
  w.write_chunk(strings, events);
}

std::vector<std::string> write_fixture(const std::string& base) {
  auto paths = test::write_synthetic_run(base);
  WriterOptions o;
  o.rank = 2;
  o.world_size = 0;
  const std::string p = base + ".rank2.mct";
  TraceWriter w(p, o);
  std::vector<Event> ev = {Event::from(make_meta(0, MetaKey::Rank, 2)),
                           Event::from(make_host_span(EventKind::Launch, 1000, 3000, 0, 1, 77)),
                           Event::from(make_compute(EventKind::Kernel, 5000, 9000, 7, 2, 77, 0, 0)),
                           Event::from(make_compute(EventKind::Memcpy, 9000, 9500, 7, encode_bytes32(4096), 0, 0, 1))};
  w.write_chunk({{1, "cudaLaunchKernel"}, {2, "gemm \"fast\" <float>"}}, ev);
  paths.push_back(p);
  return paths;
}
}  // namespace

TEST_CASE("chrome export parses back with the required fields, tracks and flows", "[profiler][export]") {
  const std::string base = test::temp_path("chrome");
  const auto paths = write_fixture(base);
  const TraceSet set = TraceSet::load(paths);
  const std::string out = base + ".json";
  const ChromeExportStats st = export_chrome(set, out);
  const nlohmann::json j = memcomm::test::read_json(out);
  REQUIRE(j.contains("traceEvents"));
  const auto& evs = j["traceEvents"];
  std::map<std::string, int> by_ph;
  std::map<int64_t, std::string> process_names;
  std::map<uint64_t, std::vector<std::string>> flows;
  bool memory_counter = false, kernel = false, collective = false, phase = false;
  for (const auto& e : evs) {
    REQUIRE(e.contains("ph"));
    REQUIRE(e.contains("pid"));
    const std::string ph = e["ph"];
    by_ph[ph]++;
    if (ph == "M" && e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
    if (ph == "X") {
      REQUIRE(e.contains("ts"));
      REQUIRE(e.contains("dur"));
      REQUIRE(e.contains("tid"));
      REQUIRE(e.contains("name"));
      CHECK(e["dur"].get<double>() >= 0);
      kernel |= e["cat"] == "kernel" && e["name"] == "gemm \"fast\" <float>";
      collective |= e["cat"] == "collective" && e["name"] == "all_reduce" && e["args"]["bytes"] == 100000000;
      phase |= e["cat"] == "phase" && e["name"] == "backward" && e["dur"].get<double>() == Approx(5000.0);
    }
    if (ph == "C" && e["name"] == "memory") {
      REQUIRE(e["args"].contains("allocated"));
      REQUIRE(e["args"].contains("reserved"));
      memory_counter = true;
    }
    if (ph == "s" || ph == "f") flows[e["id"]].push_back(ph);
  }
  CHECK(process_names.size() == 3);
  CHECK(process_names[0] == "rank 0 (node-a)");
  CHECK(kernel);
  CHECK(collective);
  CHECK(phase);
  CHECK(memory_counter);
  // One launch flow and one cross-rank collective flow, each a start/finish pair.
  CHECK(flows.size() == 2);
  for (auto& [id, phs] : flows) CHECK(phs == std::vector<std::string>{"s", "f"});
  CHECK(st.flows == 2);
  for (const auto& p : paths) std::remove(p.c_str());
  std::remove(out.c_str());
}

TEST_CASE("chrome export keeps a span past 4.29 s and says a NaN counter is one", "[profiler][export]") {
  // Note [Durations in 32 bits]; JSON has no NaN, and a 0 would hide a diverged loss.
  const std::string path = test::temp_path("chrome-long") + ".rank0.mct";
  write_rank(path, 0, {{1, "cudaDeviceSynchronize"}, {2, "loss"}},
             {Event::from(make_host_span(EventKind::Sync, 1000, 1000 + 600'000'000'000, 0, 1)),
              Event::from(make_counter(2000, 2, 1.5)), Event::from(make_counter(3000, 2, std::nan("")))});
  const std::string out = path + ".json";
  export_chrome(TraceSet::load({path}), out);
  const nlohmann::json j = memcomm::test::read_json(out);
  bool sync = false, nan_instant = false;
  int loss_samples = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "cudaDeviceSynchronize") sync = e["dur"].get<double>() == Approx(6e8);
    if (e["ph"] == "C" && e["name"] == "loss") {
      ++loss_samples;
      CHECK(e["args"]["loss"].get<double>() == 1.5);
    }
    if (e["ph"] == "i" && e["name"] == "loss = nan") nan_instant = true;
  }
  CHECK(sync);  // ten minutes, in microseconds
  CHECK(loss_samples == 1);
  CHECK(nan_instant);
  std::remove(path.c_str());
  std::remove(out.c_str());
}

TEST_CASE("chrome export: collectives in flight together get lanes where they nest, arrows run forward, names parse",
          "[profiler][export]") {
  // DDP's buckets overlap on one communicator: one lane made slices Perfetto drops. Rank 1 began first:
  // an arrow from rank 0 to rank 1 pointed back in time. A thread name the kernel cut inside a UTF-8
  // character made a file no JSON parser reads.
  const std::string base = test::temp_path("chrome-overlap");
  const auto coll = [](EventKind k, int64_t ts, uint32_t seq) {
    return Event::from(make_collective(k, ts, CollOp::AllReduce, DType::F32, 1 << 20, 0, seq));
  };
  std::vector<std::string> paths;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    const int64_t lead = rank == 1 ? -400 : 0;  // rank 1 begins each collective first
    paths.push_back(base + ".rank" + std::to_string(rank) + ".mct");
    write_rank(paths.back(), rank, {{1, std::string("dataloader_wkr\xc3", 15)}},
               {Event::from(make_meta(0, MetaKey::ThreadName, 0, 1, 0)), coll(EventKind::CollStart, 1000 + lead, 1),
                coll(EventKind::CollStart, 2000 + lead, 2), coll(EventKind::CollEnd, 5000, 1),
                coll(EventKind::CollEnd, 6000, 2), coll(EventKind::CollStart, 7000 + lead, 3),
                coll(EventKind::CollEnd, 8000, 3)});
  }
  const std::string out = base + ".json";
  export_chrome(TraceSet::load(paths), out);
  const nlohmann::json j = memcomm::test::read_json(out);  // throws on invalid UTF-8
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>> lanes;
  std::map<uint64_t, std::map<std::string, double>> flows;
  std::vector<std::string> thread_names;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "collective") {
      const double b = e["ts"];
      lanes[{e["pid"], e["tid"]}].push_back({b, b + e["dur"].get<double>()});
    }
    if ((e["ph"] == "s" || e["ph"] == "f") && e["cat"] == "collective") flows[e["id"]][e["ph"]] = e["ts"];
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names.push_back(e["args"]["name"]);
  }
  CHECK(lanes.size() == 4);  // each rank: seq 1 and 3 on one lane, seq 2 beside them
  for (auto& [lane, slices] : lanes)
    for (std::size_t i = 1; i < slices.size(); ++i) CHECK(slices[i - 1].second <= slices[i].first);
  REQUIRE(flows.size() == 3);
  for (auto& [id, ends] : flows) CHECK(ends["s"] <= ends["f"]);
  CHECK(std::count(thread_names.begin(), thread_names.end(), "dataloader_wkr\xef\xbf\xbd") == 2);  // U+FFFD, no " (0)"
  CHECK(std::count(thread_names.begin(), thread_names.end(), "collectives (comm 0, overlapping 1)") == 2);
  for (const auto& p : paths) std::remove(p.c_str());
  std::remove(out.c_str());
}

TEST_CASE("memcomm-trace export and merge to /dev/stdout redirected to a file leave the result whole", "[profiler][tool]") {
  // The summary line went to standard output too, at offset 0 of the file the result had just been
  // written to from its start: it overwrote the JSON's first bytes, and the tool exited 0.
  const std::string base = test::temp_path("tool-stdout");
  const auto paths = write_fixture(base);
  const std::string files = paths[0] + " " + paths[1] + " " + paths[2];
  const std::string json = base + ".json", merged = base + ".merged.mct", log = base + ".log";
  REQUIRE(std::system((tool() + " export --chrome /dev/stdout " + files + " > " + json + " 2> " + log).c_str()) == 0);
  CHECK(memcomm::test::read_json(json).contains("traceEvents"));
  std::ifstream said(log);
  CHECK(std::string(std::istreambuf_iterator<char>(said), {}).find("wrote stdout: 3 ranks") != std::string::npos);
  REQUIRE(std::system((tool() + " merge --force /dev/stdout " + files + " > " + merged + " 2> " + log).c_str()) == 0);
  CHECK(TraceSet::load({merged}).ranks.size() == 3);
  for (const auto& p : paths) std::remove(p.c_str());
  for (const auto& p : {json, merged, log}) std::remove(p.c_str());
}

TEST_CASE("memcomm-trace info splits memory events by device when a file holds several", "[profiler][tool]") {
  const std::string p = test::temp_path("devices") + ".mct";
  std::vector<Event> ev;
  ev.push_back(Event::from(make_mem_block(EventKind::SegmentAlloc, 100, 0x7f0000000000, 2 << 20, 0)));
  for (int i = 0; i < 3; ++i)
    ev.push_back(Event::from(make_mem_block(EventKind::Alloc, 200 + i, 0x7f0000000000 + 512 * i, 512, 0)));
  ev.push_back(Event::from(make_mem_block(EventKind::SegmentAlloc, 300, 0x1000, 4096, kHostDevice)));
  write_rank(p, 0, {}, ev);
  std::string out;
  REQUIRE(run(tool() + " info " + p, out) == 0);
  CHECK(out.find("memory events by device") != std::string::npos);
  CHECK(out.find("3 block, 1 segment") != std::string::npos);
  CHECK(out.find("0 block, 1 segment") != std::string::npos);
  REQUIRE(run(tool() + " info --json " + p, out) == 0);
  const auto by_device = memcomm::test::parse_json(out)[0]["memory_by_device"];
  REQUIRE(by_device.size() == 2);
  CHECK(by_device[0]["device"] == "device 0");
  CHECK(by_device[0]["block_events"] == 3);
  CHECK(by_device[1]["device"] == "host");
  CHECK(by_device[1]["segment_events"] == 1);
  std::remove(p.c_str());
}

TEST_CASE("memcomm-trace warns that a rank's memory figures count dropped frees' blocks as live", "[profiler][tool]") {
  // A burst of 300k tensors read 95-115 MiB live where 73 MiB were, and nothing said why.
  const std::string p = test::temp_path("drops") + ".mct";
  DropEvent d{};
  d.ts = 300;
  d.kind = EventKind::Drops;
  d.count = 7;
  write_rank(p, 3, {},
             {Event::from(make_mem_block(EventKind::SegmentAlloc, 100, 0x7f0000000000, 2 << 20, 0)),
              Event::from(make_mem_block(EventKind::Alloc, 200, 0x7f0000000000, 512, 0)), Event::from(d)});
  std::string out;
  for (const char* sub : {"memory ", "report "}) {
    REQUIRE(run(tool() + " " + sub + p, out) == 0);
    CHECK(out.find("warning: " + p + ": rank 3 dropped 7 events while recording") != std::string::npos);
  }
  std::remove(p.c_str());
}

TEST_CASE("memcomm-trace warns that a file holding its header alone has no events", "[profiler][tool]") {
  // A recorder killed before its first chunk: advise said "nothing to change" with exit 0 and nothing
  // on stderr, as if the run had been quiet.
  const std::string p = test::temp_path("header_only") + ".mct";
  write_rank(p, 0, {}, {Event::from(make_mem_block(EventKind::Alloc, 200, 0x7f0000000000, 512, 0))});
  std::filesystem::resize_file(p, sizeof(FileHeader));
  std::string out;
  for (const char* sub : {"info ", "report ", "advise "}) {
    REQUIRE(run(tool() + " " + sub + p, out) == 0);
    CHECK(out.find("warning: " + p + ": holds no events (its recorder ended before writing a chunk)") !=
          std::string::npos);
  }
  std::remove(p.c_str());
}

TEST_CASE("memcomm-trace info, export, merge and report work on per-rank and merged files", "[profiler][tool]") {
  const std::string base = test::temp_path("tool");
  const auto paths = write_fixture(base);
  const std::string files = paths[0] + " " + paths[1] + " " + paths[2];
  std::string out;

  REQUIRE(run(tool() + " info " + files, out) == 0);
  CHECK(out.find("coll_end") != std::string::npos);
  CHECK(out.find("complete file") != std::string::npos);

  const std::string merged = base + ".merged.mct";
  REQUIRE(run(tool() + " merge " + merged + " " + files, out) == 0);
  CHECK(out.find("rank 1: clock offset 1000 ns applied") != std::string::npos);
  const TraceSet m = TraceSet::load({merged});
  REQUIRE(m.ranks.size() == 3);
  const TraceSet direct = TraceSet::load(paths);
  for (size_t i = 0; i < 3; ++i) {
    REQUIRE(m.ranks[i].events.size() == direct.ranks[i].events.size());
    for (size_t k = 0; k < m.ranks[i].events.size(); ++k) REQUIRE(m.ranks[i].events[k].ts == direct.ranks[i].events[k].ts);
  }
  CHECK(m.ranks[2].name(m.ranks[2].events[2].as<ComputeEvent>().arg) == "gemm \"fast\" <float>");

  REQUIRE(run(tool() + " report --json " + merged, out) == 0);
  const auto rep = memcomm::test::parse_json(out);
  REQUIRE(rep["collectives"].size() == 1);
  CHECK(rep["collectives"][0]["straggler_rank"] == 1);
  CHECK(rep["collectives"][0]["busbw_gbps"].get<double>() == Approx(100e6 / 3.5e6));
  REQUIRE(run(tool() + " report " + files, out) == 0);
  CHECK(out.find("Temporal breakdown") != std::string::npos);

  const std::string json = base + ".json";
  REQUIRE(run(tool() + " export --chrome " + json + " " + files, out) == 0);
  CHECK(memcomm::test::read_json(json)["traceEvents"].size() > 10);

  // Truncated input: warning, still works. Unreadable input and bad usage: exit 2 with the reason.
  {
    std::ifstream f(paths[0], std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::ofstream(paths[0], std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size() - 10));
  }
  REQUIRE(run(tool() + " info " + paths[0], out) == 0);
  CHECK(out.find("trailing bytes ignored") != std::string::npos);
  {
    std::ofstream(paths[1], std::ios::binary | std::ios::trunc) << "garbage";
  }
  CHECK(run(tool() + " report " + paths[1], out) == 2);
  CHECK(out.find("not a memcomm trace") != std::string::npos);
  CHECK(run(tool() + " export " + files, out) == 2);
  CHECK(run(tool() + " frobnicate", out) == 2);
  for (const auto& p : paths) std::remove(p.c_str());
  std::remove(merged.c_str());
  std::remove(json.c_str());
}

namespace {
std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}
}  // namespace

TEST_CASE("memcomm-trace exit codes: 2 for unreadable input, usage and an output that cannot be made, 1 for a failed write", "[profiler][tool]") {
  const std::string base = test::temp_path("codes");
  const auto paths = write_fixture(base);
  const std::string good = read_bytes(paths[0]);
  const std::string bad = base + ".bad.mct";
  std::string out;

  // A foreign file, in every subcommand.
  write_bytes(bad, "not a trace at all");
  const std::vector<std::string> subcommands = {"info ", "report ", "advise --no-replay ",
                                                "export --chrome " + base + ".json ", "merge " + base + ".merged.mct "};
  for (const std::string& sub : subcommands) {
    INFO(sub);
    CHECK(run(tool() + " " + sub + bad, out) == 2);
    CHECK(out.find("not a memcomm trace") != std::string::npos);
  }
  // A corrupt header checksum, and a corrupt chunk.
  std::string corrupt = good;
  corrupt[offsetof(FileHeader, header_checksum)] ^= 1;
  write_bytes(bad, corrupt);
  CHECK(run(tool() + " report " + bad, out) == 2);
  CHECK(out.find("header checksum mismatch") != std::string::npos);
  corrupt = good;
  corrupt[sizeof(FileHeader) + sizeof(ChunkHeader) + 5] ^= 0x40;
  write_bytes(bad, corrupt);
  CHECK(run(tool() + " report " + bad, out) == 2);
  CHECK(out.find("chunk 0") != std::string::npos);
  CHECK(run(tool() + " info " + bad, out) == 2);
  // An empty file is called that, not a bad magic.
  write_bytes(bad, "");
  CHECK(run(tool() + " report " + bad, out) == 2);
  CHECK(out.find(bad + ": empty file (0 bytes)") != std::string::npos);
  CHECK(out.find("magic") == std::string::npos);
  CHECK(run(tool() + " info " + bad, out) == 2);
  CHECK(out.find("empty file (0 bytes)") != std::string::npos);
  // A missing file is a usage error, and so is a symbolic link loop or a folder, each named as what it is
  // (CLI11's check said "File does not exist" for all three).
  CHECK(run(tool() + " report " + base + ".missing.mct", out) == 2);
  CHECK(out.find(base + ".missing.mct: no such file") != std::string::npos);
  const std::string loop = base + ".loop.mct";
  std::filesystem::remove(loop);
  std::filesystem::create_symlink(loop, loop);
  CHECK(run(tool() + " info " + loop, out) == 2);
  CHECK(out.find(loop + ": Too many levels of symbolic links") != std::string::npos);
  std::filesystem::remove(loop);
  CHECK(run(tool() + " memory " + std::filesystem::temp_directory_path().string(), out) == 2);
  CHECK(out.find(": is a folder, not a file") != std::string::npos);
  // A --comm-kernels pattern that is no regular expression, though only .mct files are read (it
  // was checked by the torch.profiler reader alone, and ignored here with exit 0).
  CHECK(run(tool() + " report --comm-kernels '(' " + paths[0], out) == 2);
  CHECK(out.find("--comm-kernels: '(' is not a valid regular expression") != std::string::npos);

  // --rows must be a count; the message says so in words.
  for (const char* rows : {"0", "-3", "many", "2.5", "1e3"}) {
    INFO(rows);
    CHECK(run(tool() + " report --rows " + rows + " " + paths[0], out) == 2);
    CHECK(out.find("--rows: must be a whole number of at least 1, got '" + std::string(rows) + "'") != std::string::npos);
    CHECK(out.find("1797693") == std::string::npos);
  }
  CHECK(run(tool() + " report --rows 99999999999999999999 " + paths[0], out) == 2);
  CHECK(out.find("is too large") != std::string::npos);
  CHECK(run(tool() + " frobnicate " + paths[0], out) == 2);
  CHECK(out.find("unknown subcommand 'frobnicate' (one of: info, export") != std::string::npos);
  CHECK(run(tool() + " memory --rank -1 " + paths[0], out) == 2);
  CHECK(out.find("--rank: must be a whole number of at least 0, got '-1'") != std::string::npos);
  CHECK(run(tool() + " report --rows 1 " + paths[0], out) == 0);

  // Good input, an output whose folder does not exist: a usage error before any work, as in the other tools; one
  // that fails while being written (a full disk) is a runtime failure.
  CHECK(run(tool() + " export --chrome /nonexistent-dir/x.json " + paths[0], out) == 2);
  CHECK(out.find("output /nonexistent-dir/x.json: the folder /nonexistent-dir does not exist") != std::string::npos);
  CHECK(run(tool() + " merge /nonexistent-dir/x.mct " + paths[0], out) == 2);
  if (std::filesystem::exists("/dev/full")) {
    CHECK(run(tool() + " export --chrome /dev/full " + paths[0], out) == 1);
    CHECK(out.find("writing '/dev/full' failed: No space left on device") != std::string::npos);
    // A result printed to standard output that a full disk did not take (Note [Output that was not written]).
    CHECK(run("{ " + tool() + " info " + paths[0] + " > /dev/full; }", out) == 1);
    CHECK(out.find("memcomm-trace: standard output could not be written (No space left on device)") != std::string::npos);
  }
  // A folder is never an output, --force or not (Note [Outputs that would destroy data]).
  const std::string folder = test::temp_path("exit-codes-folder");
  std::filesystem::create_directories(folder);
  CHECK(run(tool() + " merge --force " + folder + " " + paths[0], out) == 2);
  CHECK(out.find("is a folder") != std::string::npos);

  CHECK(run(tool() + " --help", out) == 0);
  CHECK(out.find("Exit codes: 0 success; 1 a runtime failure") != std::string::npos);
  for (const auto& p : paths) std::remove(p.c_str());
  std::remove(bad.c_str());
  std::filesystem::remove(folder);
}

TEST_CASE("memcomm-trace never overwrites an input, and merge needs --force for an existing OUT", "[profiler][tool]") {
  // See Note [Outputs that would destroy data]: a forgotten OUT makes the first trace the output.
  const std::string base = test::temp_path("overwrite");
  const auto paths = write_fixture(base);
  REQUIRE(paths.size() >= 2);
  const std::string rank0 = read_bytes(paths[0]);
  std::string out;
  CHECK(run(tool() + " merge " + paths[0] + " " + paths[1], out) == 2);  // OUT forgotten
  CHECK(out.find("already exists") != std::string::npos);
  CHECK(run(tool() + " merge --force " + paths[0] + " " + paths[0] + " " + paths[1], out) == 2);
  CHECK(out.find("is also an input") != std::string::npos);
  CHECK(run(tool() + " export --chrome " + paths[0] + " " + paths[0], out) == 2);
  CHECK(out.find("is also an input") != std::string::npos);
  CHECK(read_bytes(paths[0]) == rank0);  // untouched
  // '-' is stdout (the JSON alone there), not a file named '-'.
  const std::string json = base + ".stdout.json";
  REQUIRE(std::system((tool() + " export --chrome - " + paths[0] + " > " + json + " 2>/dev/null").c_str()) == 0);
  CHECK(read_bytes(json).rfind("{", 0) == 0);
  // What the shell wrote around it stays: stdout is written, never replaced.
  REQUIRE(std::system(("{ echo header; " + tool() + " export --chrome - " + paths[0] + " 2>/dev/null; echo trailer; } > " +
                       json).c_str()) == 0);
  const std::string around = read_bytes(json);
  CHECK(around.rfind("header\n{", 0) == 0);
  CHECK(around.size() > 8);
  CHECK(around.substr(around.size() - 8) == "trailer\n");
  CHECK_FALSE(std::filesystem::exists("-"));

  const std::string merged = base + ".merged.mct";
  REQUIRE(run(tool() + " merge " + merged + " " + paths[0] + " " + paths[1], out) == 0);
  CHECK(run(tool() + " merge " + merged + " " + paths[0], out) == 2);
  CHECK(out.find("already exists; pass --force") != std::string::npos);
  CHECK(run(tool() + " merge --force " + merged + " " + paths[0], out) == 0);
  CHECK(TraceSet::load({merged}).ranks.size() == 1);
  for (const auto& p : paths) std::remove(p.c_str());
  std::remove(merged.c_str());
  std::remove(json.c_str());
}
