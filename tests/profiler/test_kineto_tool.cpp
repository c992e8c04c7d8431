// memcomm-trace on torch.profiler (Kineto) traces, end to end: info on every shared set, JSON that
// is not a torch.profiler trace (exit 2 in every subcommand), a file cut short (loaded up to its
// last complete event, with a warning, in every subcommand), convert's round trip, and export,
// merge, report and advise on the 2-rank pair. Cases that need ../shared/traces/kineto skip
// without it.
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "json_text.hpp"
#include "kineto_fixture.hpp"
#include "memcomm/trace/trace_set.hpp"
#include "memcomm_test.hpp"
#include "trace_fixtures.hpp"

using namespace memcomm::prof;
namespace fs = std::filesystem;

namespace {

struct Run {
  int code = -1;
  std::string out, err;
};

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(text.data(), std::streamsize(text.size()));
}

// memcomm-trace ARGS, stdout and stderr apart.
Run trace_tool(const std::string& args) {
  const std::string base = test::temp_path("ktool");
  const int st = std::system((memcomm::test::bin_dir() + "/memcomm-trace " + args + " >" + base + ".out 2>" + base +
                              ".err").c_str());
  Run r{WIFEXITED(st) ? WEXITSTATUS(st) : -1, read_text(base + ".out"), read_text(base + ".err")};
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The shared traces by set (sub-folder), each set's files sorted; empty without ../shared.
std::map<std::string, std::vector<std::string>> shared_sets() {
  std::map<std::string, std::vector<std::string>> sets;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(memcomm::test::shared_kineto_dir(), ec)) {
    if (!d.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(d.path()))
      if (contains(f.path().filename().string(), ".json")) sets[d.path().filename().string()].push_back(f.path().string());
    std::sort(sets[d.path().filename().string()].begin(), sets[d.path().filename().string()].end());
  }
  return sets;
}

std::string joined(const std::vector<std::string>& files) {
  std::string s;
  for (const auto& f : files) s += " " + f;
  return s;
}

// The same events (byte for byte, in order) and the same string tables.
void check_same(const TraceSet& a, const TraceSet& b) {
  REQUIRE(a.ranks.size() == b.ranks.size());
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    const RankTrace &x = a.ranks[i], &y = b.ranks[i];
    CHECK(x.rank == y.rank);
    CHECK(x.world_size == y.world_size);
    REQUIRE(x.events.size() == y.events.size());
    CHECK(std::memcmp(x.events.data(), y.events.data(), x.events.size() * sizeof(Event)) == 0);
    // Ids the .mct copy leaves undefined read back as "": compare up to the longer table.
    for (size_t s = 0; s < std::max(x.strings.size(), y.strings.size()); ++s)
      CHECK(std::string(x.name(StringId(s))) == std::string(y.name(StringId(s))));
  }
}

}  // namespace

TEST_CASE("memcomm-trace info describes every shared torch.profiler trace", "[kineto][tool][shared]") {
  const auto sets = shared_sets();
  if (sets.empty()) MEMCOMM_SKIP_TEST("no torch.profiler traces in " + memcomm::test::shared_kineto_dir());
  // SOURCES.md: traceEvents, kernels and NCCL kernels per file, and the rank distributedInfo gives.
  struct Expect {
    uint64_t events, kernels, nccl;
    int rank;
  };
  const std::map<std::string, Expect> expect = {
      {"sampled_rank-0.json.gz", {4855, 1154, 10, 0}},
      {"sampled_rank-1.json.gz", {4720, 1104, 10, 1}},
      {"nccl_data.json.gz", {40573, 2700, 21, 0}},
      {"df_index_resolver.json.gz", {216092, 19370, 2020, 1}},
      {"rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", {68692, 4350, 0, 0}},
      {"mi250_minitoy_train_ROCm6_2_kineto.json.gz", {220, 14, 0, 0}},
      {"benchmark_result_2869224_1695835535_trace.json.gz", {1408, 79, 0, 0}}};
  size_t seen = 0;
  for (const auto& [set, files] : sets) {
    INFO(set);
    Run text = trace_tool("info" + joined(files));
    REQUIRE(text.code == 0);
    CHECK(text.err.empty());
    CHECK(contains(text.out, "format: torch.profiler trace (gzip)"));
    CHECK(contains(text.out, "events per kind:"));
    CHECK(contains(text.out, "category "));
    CHECK(contains(text.out, "ranks:"));
    Run json = trace_tool("info --json" + joined(files));
    REQUIRE(json.code == 0);
    const auto all = memcomm::test::parse_json(json.out);
    REQUIRE(all.size() == files.size());
    for (const auto& j : all) {
      const std::string name = fs::path(j["file"].get<std::string>()).filename().string();
      INFO(name);
      CHECK(j["format"] == "torch.profiler");
      CHECK(j["truncated"] == false);
      CHECK(j["duration_s"].get<double>() > 0);
      const auto& k = j["kineto"];
      CHECK(k["converted"] == j["events"]);
      CHECK(j["kinds"].contains("range_begin"));
      auto it = expect.find(name);
      if (it == expect.end()) continue;  // a trace added since: the checks above still apply
      ++seen;
      CHECK(k["trace_events"].get<uint64_t>() == it->second.events);
      CHECK(j["kinds"].value("kernel", uint64_t(0)) == it->second.kernels);
      CHECK(k["comm_kernels"].get<uint64_t>() == it->second.nccl);
      REQUIRE(j["ranks"].size() == 1);
      CHECK(j["ranks"][0]["rank"].get<int>() == it->second.rank);
      if (name == "df_index_resolver.json.gz") {
        CHECK(k["memory_events"].get<uint64_t>() == 28010);
        CHECK(contains(text.out, "[memory] events 28010"));
      }
    }
  }
  CHECK(seen == expect.size());
}

TEST_CASE("JSON that is not a torch.profiler trace exits 2 in every subcommand", "[kineto][tool]") {
  const std::string base = test::temp_path("notkineto");
  const std::vector<std::string> inputs = {"{\"foo\": 1}", "[1, 2, 3]", "{\"traceEvents\": 5}", "  \n{\"a\": [1, {}]}"};
  const std::vector<std::string> subcommands = {"info ",
                                                "report ",
                                                "advise ",
                                                "export --chrome " + base + ".out.json ",
                                                "merge " + base + ".merged.mct ",
                                                "convert "};
  const std::string bad = base + ".json";
  for (const std::string& text : inputs) {
    write_text(bad, text);
    for (const std::string& sub : subcommands) {
      INFO(text << " / " << sub);
      const Run r = trace_tool(sub + bad + (sub == "convert " ? " " + base + ".mct" : ""));
      CHECK(r.code == 2);
      CHECK(contains(r.err, "not a torch.profiler trace"));
      CHECK(contains(r.err, bad));
    }
  }
  // Text that is neither JSON nor .mct is still called not a memcomm trace.
  write_text(bad, "hello");
  const Run r = trace_tool("report " + bad);
  CHECK(r.code == 2);
  CHECK(contains(r.err, "not a memcomm trace"));
  for (const char* ext : {".json", ".out.json", ".merged.mct", ".mct"}) std::remove((base + ext).c_str());
}

TEST_CASE("a torch.profiler trace cut short loads up to its last complete event, with a warning", "[kineto][tool]") {
  const std::string base = test::temp_path("kcut");
  const auto fx = memcomm::test::kineto_fixture(0, 6, true);
  // Cut in the middle of an event about halfway through.
  const size_t cut = fx.json.find("{\"ph\"", fx.json.size() / 2) + 10;
  REQUIRE(cut > fx.json.size() / 2);
  const std::string path = base + ".pt.trace.json";
  write_text(path, fx.json.substr(0, cut));
  const std::vector<std::string> subcommands = {"info ",
                                                "info --json ",
                                                "report ",
                                                "advise ",
                                                "export --chrome " + base + ".out.json ",
                                                "merge " + base + ".merged.mct ",
                                                "convert "};
  for (const std::string& sub : subcommands) {
    INFO(sub);
    std::remove((base + ".merged.mct").c_str());
    std::remove((base + ".mct").c_str());
    const Run r = trace_tool(sub + path + (sub == "convert " ? " " + base + ".mct" : ""));
    CHECK(r.code == 0);
    CHECK(contains(r.err, "warning: " + path + ": the file ends early"));
    CHECK(contains(r.err, "up to JSON byte"));
  }
  const TraceSet cut_set = TraceSet::load({path});
  REQUIRE(cut_set.files.size() == 1);
  CHECK(cut_set.files[0].recovery.truncated);
  CHECK(cut_set.files[0].recovery.bytes_used < cut);
  CHECK(cut_set.files[0].recovery.bytes_used > cut / 2);
  // Its events are the complete trace's before the cut: fewer, and every one is there.
  write_text(base + ".full.json", fx.json);
  const TraceSet full = TraceSet::load({base + ".full.json"});
  CHECK(cut_set.ranks[0].events.size() < full.ranks[0].events.size());
  CHECK(cut_set.ranks[0].events.size() > full.ranks[0].events.size() / 4);

  // A gzip stream cut short (a real trace where ../shared has one).
  const std::string gz = memcomm::test::shared_kineto_dir() + "/nccl_data/nccl_data.json.gz";
  if (fs::exists(gz)) {
    const std::string bytes = read_text(gz);
    write_text(base + ".json.gz", bytes.substr(0, bytes.size() / 2));
    const Run r = trace_tool("info " + base + ".json.gz");
    CHECK(r.code == 0);
    CHECK(contains(r.err, "the file ends early"));
    CHECK(contains(r.out, "warning:"));
    std::remove((base + ".json.gz").c_str());
  }
  for (const char* ext : {".pt.trace.json", ".full.json", ".out.json", ".merged.mct", ".mct"})
    std::remove((base + ext).c_str());
}

TEST_CASE("memory counts what a memory profile held before its first event", "[kineto][tool]") {
  // Note [Bytes a memory profile never saw allocated] (allocations.cpp): 1000 B were allocated before
  // the profile began; the trace allocates 512 B (Total Allocated 1512) and frees them again.
  const std::string path = test::temp_path("kbefore") + ".pt.trace.json";
  const auto mem = [](long long ts, int addr, int bytes, int total) {
    return R"({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": )" +
           std::to_string(ts) + R"(, "args": {"Device Type": 1, "Device Id": 0, "Addr": )" + std::to_string(addr) +
           R"(, "Bytes": )" + std::to_string(bytes) + R"(, "Total Allocated": )" + std::to_string(total) +
           R"(, "Total Reserved": 2097152}})";
  };
  write_text(path, R"({"traceEvents": [)" + mem(1712195495406010, 4096, 512, 1512) + "," + mem(1712195495406020, 4096, -512, 1000) + "]}");
  const Run peak = trace_tool("memory --at peak --json " + path);
  INFO(peak.err);
  REQUIRE(peak.code == 0);
  const auto j = nlohmann::json::parse(peak.out);
  CHECK(j["live_bytes"] == 1512);
  bool before = false;
  for (const auto& site : j["sites"]) before |= site["stack"][0] == "<allocated before the trace>" && site["bytes"] == 1000;
  CHECK(before);
  std::remove(path.c_str());
}

TEST_CASE("a trace whose kernel launches reached no recorded kernel says so", "[kineto][tool]") {
  // A GPU script profiled without ProfilerActivity.CUDA: operators and their kernel launches, no kernel.
  const std::string path = test::temp_path("knodevice") + ".pt.trace.json";
  const auto op = [](const char* cat, const char* name, long long ts, int corr) {
    return std::string(R"({"ph": "X", "cat": ")") + cat + R"(", "name": ")" + name + R"(", "pid": 1, "tid": 1, "ts": )" +
           std::to_string(ts) + R"(, "dur": 5, "args": {"correlation": )" + std::to_string(corr) + "}}";
  };
  write_text(path, R"({"traceEvents": [)" + op("cpu_op", "aten::mm", 1700000000000000, 0) + "," +
                       op("cuda_runtime", "cudaLaunchKernel", 1700000000000001, 7) + "," +
                       op("cuda_runtime", "cudaGetDevice", 1700000000000008, 0) + "]}");
  const Run r = trace_tool("report " + path);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.err, "rank 0 launched 1 kernel but the trace holds none that ran"));
  CHECK(contains(r.err, "its breakdown counts no device compute"));
  std::remove(path.c_str());
}

TEST_CASE("a CPU trace's compute is its operators, not the record_function label around them", "[kineto][tool]") {
  // torch.profiler's tutorial wraps the model in record_function("model_inference"): two operators
  // of 10 us, 40 us apart, under a label of 100 us are a third of their window's time, not all of the
  // label's (Note [Breakdown definitions]: without steps, the window spans the work).
  const std::string path = test::temp_path("kannotated") + ".pt.trace.json";
  const auto span = [](const char* cat, const char* name, long long ts, int dur) {
    return std::string(R"({"ph": "X", "cat": ")") + cat + R"(", "name": ")" + name + R"(", "pid": 1, "tid": 1, "ts": )" +
           std::to_string(1700000000000000 + ts) + R"(, "dur": )" + std::to_string(dur) + "}";
  };
  write_text(path, R"({"traceEvents": [)" + span("user_annotation", "model_inference", 0, 100) + "," +
                       span("cpu_op", "aten::mm", 10, 10) + "," + span("cpu_op", "aten::relu", 60, 10) + "]}");
  const Run r = trace_tool("report --json " + path);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto b = nlohmann::json::parse(r.out)["ranks"][0]["breakdown"];
  CHECK(b["window_ns"] == 60'000);
  CHECK(b["compute_ns"] == 20'000);
  std::remove(path.c_str());
}

TEST_CASE("an option a subcommand does not have is named, not read as a missing input", "[kineto][tool]") {
  const std::string path = test::temp_path("kunknown") + ".pt.trace.json";
  write_text(path, R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5}]})");
  const Run r = trace_tool("export " + path + " -o out.json");  // export writes with --chrome
  CHECK(r.code == 2);
  CHECK(contains(r.err, "memcomm-trace export: unknown option '-o'"));
  CHECK_FALSE(contains(r.err, "no such file"));
  CHECK(trace_tool("export " + path + " --chrome=-").code == 0);  // '=' values and "-" are no options
  CHECK(trace_tool("memory " + path + " --bogus=1").err.find("unknown option '--bogus'") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("a trace whose memory events give no reserved bytes reports its reserved peak as unknown", "[kineto][tool]") {
  const std::string path = test::temp_path("knoreserved") + ".pt.trace.json";
  write_text(path, R"({"traceEvents": [{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, )"
                   R"("tid": 1, "ts": 1712195495406010, "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": 512, )"
                   R"("Total Allocated": 512}}]})");
  const Run j = trace_tool("report --json " + path);
  INFO(j.err);
  REQUIRE(j.code == 0);
  const auto rank = nlohmann::json::parse(j.out)["ranks"][0];
  CHECK(rank["memory_recorded"] == true);
  CHECK(rank["reserved_recorded"] == false);
  const Run text = trace_tool("report " + path);
  CHECK(contains(text.out, "0.0         -"));  // peak_MiB 0.0 (512 B), resv_MiB unknown, not 0.0
  std::remove(path.c_str());
}

TEST_CASE("memory leaves the host's blocks out of a GPU trace's sum unless --device 255 asks", "[kineto][tool]") {
  // Note [Host memory beside a GPU's] (allocations.hpp): the GPU peaks at 4000 B early, the host at
  // 300 B later; their sum peaked at neither memory's moment.
  const std::string path = test::temp_path("khost") + ".pt.trace.json";
  const auto mem = [](long long ts, int type, int addr, int bytes, int total) {
    return R"({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": )" +
           std::to_string(ts) + R"(, "args": {"Device Type": )" + std::to_string(type) + R"(, "Device Id": 0, "Addr": )" +
           std::to_string(addr) + R"(, "Bytes": )" + std::to_string(bytes) + R"(, "Total Allocated": )" +
           std::to_string(total) + R"(, "Total Reserved": 2097152}})";
  };
  write_text(path, R"({"traceEvents": [)" + mem(1712195495406010, 1, 4096, 4000, 4000) + "," +
                       mem(1712195495406020, 1, 4096, -4000, 0) + "," + mem(1712195495406030, 1, 8192, 3900, 3900) + "," +
                       mem(1712195495406040, 0, 64, 300, 300) + "]}");
  const auto live_at_peak = [&](const std::string& args) {
    const Run r = trace_tool("memory --at peak --json " + args + path);
    INFO(r.err);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out)["live_bytes"].get<std::uint64_t>();
  };
  CHECK(live_at_peak("") == 4000);  // the GPU's, not 3900 + 300 at the end
  CHECK(live_at_peak("--device 0 ") == 4000);
  CHECK(live_at_peak("--device 255 ") == 300);
  const Run text = trace_tool("memory --at peak " + path);
  CHECK(contains(text.out, "GPU memory (the host's with --device 255)"));
  // The host's, asked for, are called host memory (the label said nothing).
  CHECK(contains(trace_tool("memory --at peak --device 255 " + path).out, "(rank 0), host memory: at peak"));
  // A trace of the host's memory alone (a CPU run) says so.
  write_text(path, R"({"traceEvents": [)" + mem(1712195495406040, 0, 64, 300, 300) + "]}");
  const Run host = trace_tool("memory --at peak " + path);
  CHECK(contains(host.out, "(rank 0), host memory: at peak"));
  std::remove(path.c_str());
}

TEST_CASE("convert writes an .mct copy that reads back with the same events and strings", "[kineto][tool]") {
  const std::string base = test::temp_path("kconv");
  const auto fx = memcomm::test::kineto_fixture(1, 20, true);
  std::vector<std::string> inputs = {base + ".json"};
  write_text(inputs[0], fx.json);
  const std::string shared = memcomm::test::shared_kineto_dir();
  for (const char* f : {"/nccl_data/nccl_data.json.gz", "/df_index_resolver/df_index_resolver.json.gz"})
    if (fs::exists(shared + f)) inputs.push_back(shared + f);
  for (const std::string& in : inputs) {
    INFO(in);
    const std::string out = base + ".mct";
    std::remove(out.c_str());
    const Run r = trace_tool("convert " + in + " " + out);
    REQUIRE(r.code == 0);
    CHECK(contains(r.out, "wrote " + out));
    CHECK(contains(r.out, "size: " + out + " is "));
    check_same(TraceSet::load({in}), TraceSet::load({out}));
    if (contains(in, ".gz")) {  // compact: smaller than the gzip JSON it came from
      CHECK(contains(r.out, "x its uncompressed JSON"));
      CHECK(fs::file_size(out) < fs::file_size(in));
    }
    // OUT exists: refused without --force; lz4 reads back alike.
    CHECK(trace_tool("convert " + in + " " + out).code == 2);
    REQUIRE(trace_tool("convert --force --codec lz4 " + in + " " + out).code == 0);
    check_same(TraceSet::load({in}), TraceSet::load({out}));
    // The copy describes itself as an .mct, and reports alike.
    const Run a = trace_tool("report --json " + in), b = trace_tool("report --json " + out);
    REQUIRE(a.code == 0);
    REQUIRE(b.code == 0);
    CHECK(a.out == b.out);
    std::remove(out.c_str());
  }
  CHECK(trace_tool("convert " + inputs[0] + " " + inputs[0]).code == 2);  // OUT is IN
  CHECK(trace_tool("convert --codec zip " + inputs[0] + " " + base + ".x.mct").code == 2);
  std::remove(inputs[0].c_str());
}

TEST_CASE("export puts a stream's syncs on its lane, names lanes by the trace's stream ids, and is no torch.profiler input",
          "[kineto][tool]") {
  // A kernel and a Stream Sync on CUDA stream 7, and a host cudaDeviceSynchronize. The stream's sync
  // was drawn on host thread 0's lane, and the lane was "GPU 0 stream 0".
  const std::string base = test::temp_path("ksync");
  const std::string dev = R"("pid": 0, "tid": 7, "args": {"device": 0, "stream": 7, "correlation": 5})";
  write_text(base + ".json", std::string(R"({"traceEvents": [)") +
                                 R"({"ph": "X", "cat": "kernel", "name": "gemm", "ts": 1000, "dur": 50, )" + dev + "}," +
                                 R"({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "ts": 1060, "dur": 8, )" + dev + "}," +
                                 R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 100, "tid": 101, )"
                                 R"("ts": 1055, "dur": 20, "args": {"correlation": 6}}]})");
  REQUIRE(trace_tool("export --chrome " + base + ".out.json " + base + ".json").code == 0);
  const auto j = memcomm::test::read_json(base + ".out.json");
  std::map<std::string, int64_t> tid;
  std::map<int64_t, std::string> lane;
  for (const auto& ev : j["traceEvents"]) {
    if (ev.value("ph", "") == "X") tid[ev["name"].get<std::string>()] = ev["tid"].get<int64_t>();
    if (ev.value("name", "") == "thread_name") lane[ev["tid"].get<int64_t>()] = ev["args"]["name"].get<std::string>();
  }
  REQUIRE(tid.count("gemm") + tid.count("Stream Sync") + tid.count("cudaDeviceSynchronize") == 3);
  CHECK(tid["Stream Sync"] == tid["gemm"]);
  CHECK(lane[tid["gemm"]] == "GPU 0 stream 7");
  CHECK(tid["cudaDeviceSynchronize"] != tid["gemm"]);
  CHECK(tid["cudaDeviceSynchronize"] < 100000);  // a host thread's lane (chrome_export.hpp)
  // Read back as a torch.profiler trace, its renamed events gave other figures with no word.
  const Run again = trace_tool("report " + base + ".out.json");
  CHECK(again.code == 2);
  CHECK(contains(again.err, base + ".out.json: a Chrome trace written by memcomm-trace export"));
  for (const char* ext : {".json", ".out.json"}) std::remove((base + ext).c_str());
}

TEST_CASE("export, merge, report and advise take the 2-rank torch.profiler pair", "[kineto][tool][shared]") {
  const auto sets = shared_sets();
  auto it = sets.find("sampled_pair");
  if (it == sets.end() || it->second.size() != 2) MEMCOMM_SKIP_TEST("no sampled_pair in " + memcomm::test::shared_kineto_dir());
  const std::string files = joined(it->second);
  const std::string base = test::temp_path("kpair");
  const TraceSet pair = TraceSet::load(it->second);
  REQUIRE(pair.ranks.size() == 2);

  const std::string json = base + ".json";
  const Run e = trace_tool("export --chrome " + json + files);
  REQUIRE(e.code == 0);
  CHECK(contains(e.out, "2 ranks"));
  {
    const auto j = memcomm::test::read_json(json);
    std::set<int64_t> pids;
    size_t kernels = 0, collectives = 0;
    for (const auto& ev : j["traceEvents"]) {
      pids.insert(ev["pid"].get<int64_t>());
      if (ev.value("cat", "") == "kernel") ++kernels;
      if (ev.value("cat", "") == "collective") ++collectives;
    }
    CHECK(pids.size() >= 2);
    CHECK(kernels == 1154 + 1104);
    CHECK(collectives >= 2);
  }

  const std::string merged = base + ".merged.mct";
  const Run m = trace_tool("merge " + merged + files);
  REQUIRE(m.code == 0);
  CHECK(contains(m.out, "2 ranks"));
  const TraceSet back = TraceSet::load({merged});
  REQUIRE(back.ranks.size() == 2);
  for (size_t r = 0; r < 2; ++r) {
    CHECK(back.ranks[r].rank == pair.ranks[r].rank);
    CHECK(back.ranks[r].world_size == 128);
    CHECK(back.ranks[r].events.size() == pair.ranks[r].events.size());
  }
  // The analysis of the merged file is the pair's.
  const Run a = trace_tool("report --json" + files), b = trace_tool("report --json " + merged);
  REQUIRE(a.code == 0);
  REQUIRE(b.code == 0);
  CHECK(a.out == b.out);
  const Run t = trace_tool("report" + files);
  REQUIRE(t.code == 0);
  CHECK(contains(t.out, "Temporal breakdown"));

  const Run adv = trace_tool("advise --json" + files);
  REQUIRE(adv.code == 0);
  CHECK(memcomm::test::parse_json(adv.out).is_array());
  std::remove(json.c_str());
  std::remove(merged.c_str());
}

TEST_CASE("kineto: two traces of one rank say whether distributedInfo named it", "[kineto]") {
  const std::string dir = test::temp_path("kdup");
  std::filesystem::create_directories(dir);
  const std::string events = R"("traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10,
                                   "dur": 5, "args": {"device": 0, "stream": 7}}])";
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  const std::string bare = write("bare.json", "{" + events + "}");
  const std::string bare2 = write("bare2.json", "{" + events + "}");
  const std::string named = write("named.json", R"({"distributedInfo": {"rank": 0, "world_size": 2}, )" + events + "}");
  const std::string named2 = write("named2.json", R"({"distributedInfo": {"rank": 0, "world_size": 2}, )" + events + "}");
  CHECK_THROWS_WITH(TraceSet::load({bare, bare2}), Catch::Contains("have no distributedInfo rank"));
  CHECK_THROWS_WITH(TraceSet::load({named, bare}), Catch::Contains("bare.json' has no distributedInfo rank"));
  CHECK_THROWS_WITH(TraceSet::load({named, named2}), !Catch::Contains("distributedInfo") && Catch::Contains("rank 0 appears in both"));
  CHECK_THROWS_WITH(TraceSet::load({named, named}), Catch::Contains("is given twice"));
  // A schedule with repeat writes a file per cycle, each of the same process: said so.
  const std::string cycle = R"("traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 1,
                                 "ts": 10, "dur": 5}])";
  const std::string first = write("w.1.pt.trace.json", "{" + cycle + "}");
  const std::string second = write("w.2.pt.trace.json", "{" + cycle + "}");
  CHECK_THROWS_WITH(TraceSet::load({first, second}), Catch::Contains("both were recorded by process 4242, so they are "
                                                                     "two recordings of one rank"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("kineto: traces on the Unix clock that never recorded at the same time are files of different runs", "[kineto]") {
  // See Note [One run or several]: epoch microseconds, or microseconds after baseTimeNanoseconds, are
  // wall-clock times; a clock that counts from boot or from 0 says nothing across files.
  const std::string dir = test::temp_path("kwall");
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, int rank, const std::string& top, int64_t ts_us) {
    std::ofstream(dir + "/" + name) << "{" << top << R"("distributedInfo": {"rank": )" << rank
                                    << R"(, "world_size": 2}, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k",
                                    "pid": 0, "tid": 7, "ts": )" << ts_us << R"(, "dur": 5000, "args": {"device": 0, "stream": 7}}]})";
    return dir + "/" + name;
  };
  const int64_t sep_2023_us = int64_t(1694128201) * 1000000;
  const std::string r0 = write("r0.json", 0, "", sep_2023_us);
  const std::string r1 = write("r1.json", 1, "", sep_2023_us + 2000);                          // the same run
  const std::string later = write("later.json", 1, "", sep_2023_us + int64_t(3600) * 1000000);  // an hour on
  // The same hour on, as microseconds after baseTimeNanoseconds.
  const std::string based = write("based.json", 1, R"("baseTimeNanoseconds": 1694128201000000000, )", int64_t(3600) * 1000000);
  const std::string boot0 = write("boot0.json", 0, "", 1000), boot1 = write("boot1.json", 1, "", int64_t(7) << 30);
  CHECK(TraceSet::load({r0, r1}).mixed_runs().empty());
  for (const auto& other : {later, based}) {
    const auto lines = TraceSet::load({r0, other}).mixed_runs();
    INFO(other);
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], Catch::Contains("never recorded at the same time"));
  }
  CHECK(TraceSet::load({boot0, boot1}).mixed_runs().empty());  // no wall clock: not compared
  std::filesystem::remove_all(dir);
}
