// The torch.profiler (Kineto) reader: event mapping (Note [Kineto events as memcomm events]),
// both schemas, gzip, files cut short, bad input, and the real traces in ../shared.
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "json_text.hpp"
#include "memcomm/trace/analysis.hpp"
#include "memcomm/trace/kineto.hpp"
#include "memcomm/trace/trace_set.hpp"
#include "memcomm/trace/trace_error.hpp"
#include "memcomm_test.hpp"

using namespace memcomm::prof;

namespace {

// A small current-schema trace: one step, a nested op, a launch, two kernels (one NCCL), copies,
// memory events; baseTimeNanoseconds comes after the events, as Kineto writes it.
const char* kTrace = R"json({
  "schemaVersion": 1,
  "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2},
  "deviceProperties": [{"id": 0, "name": "Test GPU", "totalGlobalMem": 1000000}],
  "traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 10, "tid": 11, "ts": 100.5, "dur": 900},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 11, "ts": 110, "dur": 50.25},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": 120, "dur": 5, "args": {"correlation": 7}},
  {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 130, "dur": 20, "args": {"device": 0, "stream": 7, "correlation": 7}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": 200, "dur": 5, "args": {"correlation": 8}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 40, "ts": 210, "dur": 100,
   "args": {"device": 0, "stream": 40, "correlation": 8, "Collective name": "allreduce", "In msg nelems": 1024,
            "Out msg nelems": 1024, "Group size": 2, "dtype": "Float", "Process Group Name": "0", "Process Group Ranks": "[0, 1]"}},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 400, "dur": 3, "args": {"device": 0, "stream": 7, "correlation": 9, "bytes": 4096}},
  {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 410, "dur": 1, "args": {"device": 0, "stream": 7, "correlation": 10, "bytes": 64}},
  {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 10, "tid": 11, "ts": 115,
   "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": 512, "Total Allocated": 512, "Total Reserved": 2097152}},
  {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 10, "tid": 11, "ts": 150,
   "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": -512, "Total Allocated": 0, "Total Reserved": 2097152}},
  {"ph": "s", "id": 7, "pid": 10, "tid": 11, "ts": 120, "cat": "ac2g", "name": "ac2g"},
  {"ph": "X", "cat": "mystery_cat", "name": "something new", "pid": 10, "tid": 12, "ts": 300, "dur": 10},
  {"name": "thread_name", "ph": "M", "pid": 10, "tid": 11, "args": {"name": "main"}},
  {"name": "process_name", "ph": "M", "pid": 10, "tid": 0, "args": {"name": "python3"}}
  ],
  "displayTimeUnit": "ms",
  "baseTimeNanoseconds": 1700000000000000000
})json";

std::map<EventKind, int> kinds(const RankTrace& t) {
  std::map<EventKind, int> n;
  for (const Event& e : t.events) ++n[e.kind];
  return n;
}

const Event* first(const RankTrace& t, EventKind k) {
  for (const Event& e : t.events)
    if (e.kind == k) return &e;
  return nullptr;
}

std::string temp_path(const std::string& name) { return "/tmp/memcomm_kineto_test_" + std::to_string(getpid()) + name; }

void write_gzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, text.data(), unsigned(text.size())) == int(text.size()));
  gzclose(f);
}

std::string shared_kineto_dir() { return memcomm::test::source_dir() + "/../shared/traces/kineto"; }

}  // namespace

TEST_CASE("kineto: every kind of event maps onto the event model", "[kineto]") {
  const KinetoTrace k = read_kineto_buffer(kTrace, "t.json");
  const RankTrace& t = k.trace;
  CHECK(t.rank == 1);
  CHECK(t.world_size == 2);
  auto n = kinds(t);
  CHECK(n[EventKind::Kernel] == 2);
  CHECK(n[EventKind::Launch] == 2);
  CHECK(n[EventKind::Memcpy] == 1);
  CHECK(n[EventKind::Memset] == 1);
  CHECK(n[EventKind::Alloc] == 1);
  CHECK(n[EventKind::FreeRequested] == 1);
  CHECK(n[EventKind::FreeCompleted] == 1);
  CHECK(n[EventKind::RangeBegin] == 3);  // the step, the op and the unknown category
  CHECK(n[EventKind::RangeEnd] == 3);
  CHECK(n[EventKind::CollEnqueue] == 1);
  CHECK(n[EventKind::CollStart] == 1);
  CHECK(n[EventKind::CollEnd] == 1);
  CHECK(n[EventKind::CommInfo] == 1);
  CHECK(k.info.flows == 1);
  CHECK(k.info.comm_kernels == 1);
  CHECK(k.info.memory_events == 2);
  CHECK(k.info.generic.at("mystery_cat") == 1);
  CHECK(k.info.float_timestamps);
  CHECK(k.info.base_time_ns == 1700000000000000000);
  CHECK(k.info.skipped.empty());

  // Timestamps: us -> ns, on the fixed origin (Note [One origin for every torch.profiler trace]).
  const int64_t shift = 1700000000000000000 - int64_t(1600000000) * 1000000000;
  const auto step = first(t, EventKind::RangeBegin)->as<RangeEvent>();
  CHECK(step.phase == Phase::Step);
  CHECK(step.id == 3);
  CHECK(first(t, EventKind::RangeBegin)->ts == 100500 + shift);

  const auto coll = first(t, EventKind::CollStart)->as<CollectiveEvent>();
  CHECK(coll.op == CollOp::AllReduce);
  CHECK(coll.dtype == DType::F32);
  CHECK(coll.bytes() == 4096);
  CHECK(coll.seq == 0);
  CHECK(first(t, EventKind::CollEnqueue)->ts == 200000 + shift);  // the launch's start
  const auto info = first(t, EventKind::CommInfo)->as<CommInfoEvent>();
  CHECK(info.size == 2);
  CHECK(info.rank == 1);

  bool saw_comm_kernel = false;
  for (const Event& e : t.events)
    if (e.kind == EventKind::Kernel) {
      const auto c = e.as<ComputeEvent>();
      if (t.name(c.arg).rfind("nccl", 0) == 0) {
        saw_comm_kernel = true;
        CHECK(c.sub == 1);
        CHECK(c.corr == 8);
        CHECK(c.duration() == 100000);
      }
    }
  CHECK(saw_comm_kernel);
  const auto copy = first(t, EventKind::Memcpy)->as<ComputeEvent>();
  CHECK(CopyKind(copy.sub) == CopyKind::HtoD);
  CHECK(decode_bytes32(copy.arg) == 4096);
  const auto alloc = first(t, EventKind::Alloc)->as<MemBlockEvent>();
  CHECK(alloc.addr() == 4096);
  CHECK(alloc.size() == 512);
  CHECK(alloc.device == 0);
}

TEST_CASE("kineto: the 2021 capitalised schema reads the same", "[kineto]") {
  const char* old = R"json({"traceEvents": [
    {"ph": "X", "cat": "Operator", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
    {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 11, "dur": 2, "args": {"correlation": 3}},
    {"ph": "X", "cat": "Kernel", "name": "add_kernel", "pid": 0, "tid": "stream 7", "ts": 20, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": 3}},
    {"ph": "X", "cat": "Memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": "stream 7", "ts": 30, "dur": 1, "args": {"device": 0, "stream": 7, "bytes": 8}}
  ]})json";
  const KinetoTrace k = read_kineto_buffer(old, "old.json");
  auto n = kinds(k.trace);
  CHECK(n[EventKind::RangeBegin] == 1);
  CHECK(n[EventKind::Launch] == 1);
  CHECK(n[EventKind::Kernel] == 1);
  CHECK(n[EventKind::Memcpy] == 1);
  CHECK(k.trace.rank == 0);  // no distributedInfo: rank 0, as HTA assumes
  CHECK(k.info.generic.empty());
}

TEST_CASE("kineto: a span that outlives its parent is cut to nest", "[kineto]") {
  const char* t = R"json({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "parent", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "child", "pid": 1, "tid": 1, "ts": 5, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "next", "pid": 1, "tid": 1, "ts": 10, "dur": 1}
  ]})json";
  const KinetoTrace k = read_kineto_buffer(t, "t.json");
  CHECK(k.info.clamped_ranges == 1);
  int depth = 0, max_depth = 0;
  for (const Event& e : k.trace.events) {  // emitted in LIFO order per thread
    if (e.kind == EventKind::RangeBegin) max_depth = std::max(max_depth, ++depth);
    if (e.kind == EventKind::RangeEnd) REQUIRE(--depth >= 0);
  }
  CHECK(depth == 0);
  CHECK(max_depth == 2);
}

TEST_CASE("kineto: the profiler's marks of its window are no work and do not lengthen the trace", "[kineto]") {
  // torch 2.11 writes "Record Window End" milliseconds after the last event: traces read 22-39 % longer.
  const KinetoTrace k = read_kineto_buffer(R"json({"traceEvents": [
    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 100, "dur": 50},
    {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 110, "dur": 30},
    {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 5000}
  ]})json", "marks.json");
  int64_t last = 0;
  int ranges = 0;
  for (const Event& e : k.trace.events) {
    if (e.kind == EventKind::Meta) continue;
    last = std::max(last, e.ts);
    ranges += e.kind == EventKind::RangeBegin;
  }
  CHECK(ranges == 1);  // aten::mm alone
  CHECK(last - first(k.trace, EventKind::RangeBegin)->ts == 30'000);
  CHECK(k.info.skipped.empty());  // understood, not unreadable
  CHECK(k.info.generic.empty());
}

TEST_CASE("kineto: the last stream lane, which holds every stream past it, says so in its name", "[kineto]") {
  // A lane named after the first stream it took showed 45 more streams' kernels under that one's name.
  std::string t = R"({"traceEvents": [)";
  for (int s = 0; s < 300; ++s)
    t += (s ? "," : "") + std::string(R"({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": )") +
         std::to_string(s) + R"(, "ts": )" + std::to_string(10 * s) + R"(, "dur": 5, "args": {"device": 0, "stream": )" +
         std::to_string(s) + "}}";
  const KinetoTrace k = read_kineto_buffer(t + "]}", "streams.json");
  std::map<uint16_t, std::string> names;
  for (const Event& e : k.trace.events)
    if (e.kind == EventKind::Meta && e.as<MetaEvent>().key == MetaKey::StreamName)
      names[e.as<MetaEvent>().thread] = std::string(k.trace.name(e.as<MetaEvent>().str));
  CHECK(names[253] == "GPU 0 stream 253");
  CHECK(names[254] == "GPU 0 stream 254 and the streams after it");
}

TEST_CASE("kineto: with_stack's Python frames get a lane of their own and never cut a step", "[kineto]") {
  // See Note [Host spans that overlap]: the step begins inside profiler.step()'s Python frame, which
  // ends 10 us later, and inside an op that ends before the step does.
  const char* t = R"json({"traceEvents": [
    {"ph": "X", "cat": "python_function", "name": "train.py(9): <module>", "pid": 1, "tid": 1, "ts": 0, "dur": 3000},
    {"ph": "X", "cat": "python_function", "name": "torch/profiler/profiler.py(821): step", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "outer_op", "pid": 1, "tid": 1, "ts": 2, "dur": 6},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": 1, "tid": 1, "ts": 5, "dur": 1000},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 30},
    {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "main"}}
  ]})json";
  const KinetoTrace k = read_kineto_buffer(t, "t.json");
  CHECK(k.info.clamped_ranges == 1);  // outer_op, which ends where the step begins
  std::map<uint16_t, std::string> lanes;
  std::map<std::string, std::pair<int64_t, int64_t>> spans;
  std::map<std::string, uint16_t> lane_of;
  std::map<uint16_t, std::vector<std::string>> open;
  for (const Event& e : k.trace.events) {
    if (e.kind == EventKind::Meta && e.as<MetaEvent>().key == MetaKey::ThreadName)
      lanes[e.as<MetaEvent>().thread] = std::string(k.trace.name(e.as<MetaEvent>().str));
    if (e.kind != EventKind::RangeBegin && e.kind != EventKind::RangeEnd) continue;
    const auto r = e.as<RangeEvent>();
    const std::string name(k.trace.name(r.name));
    if (e.kind == EventKind::RangeBegin) {
      open[r.thread].push_back(name);
      spans[name].first = e.ts;
      lane_of[name] = r.thread;
    } else {
      REQUIRE(!open[r.thread].empty());
      CHECK(open[r.thread].back() == name);  // LIFO per lane
      open[r.thread].pop_back();
      spans[name].second = e.ts;
    }
  }
  CHECK(spans["ProfilerStep#5"].second - spans["ProfilerStep#5"].first == 1000000);
  CHECK(spans["outer_op"].second - spans["outer_op"].first == 3000);
  CHECK(spans["torch/profiler/profiler.py(821): step"].second - spans["torch/profiler/profiler.py(821): step"].first == 10000);
  CHECK(lane_of["aten::mm"] == lane_of["ProfilerStep#5"]);
  CHECK(lane_of["train.py(9): <module>"] != lane_of["ProfilerStep#5"]);
  CHECK(lanes[lane_of["ProfilerStep#5"]] == "main");
  CHECK(lanes[lane_of["train.py(9): <module>"]] == "main (Python)");
}

TEST_CASE("kineto: [memory] events without Addr pair each free with a live allocation of its size", "[kineto]") {
  // See Note [Memory events without addresses]: the 2021 schema. 30 bytes were live before the trace.
  const char* t = R"json({"traceEvents": [
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1, "args": {"Device Type": 1, "Device Id": 0, "Bytes": 100}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 2, "args": {"Device Type": 1, "Device Id": 0, "Bytes": 100}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 3, "args": {"Device Type": 1, "Device Id": 0, "Bytes": -100}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 4, "args": {"Device Type": 0, "Device Id": -1, "Bytes": 100}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5, "args": {"Device Type": 1, "Device Id": 0, "Bytes": -30}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 6, "args": {"Device Type": 1, "Device Id": 0, "Bytes": -100}}
  ]})json";
  const KinetoTrace k = read_kineto_buffer(t, "t.json");
  CHECK(k.info.memory_events_without_addr == 6);
  std::vector<uint64_t> gpu_allocs, gpu_frees, host;
  std::vector<uint64_t> allocated;
  for (const Event& e : k.trace.events) {
    if (e.kind == EventKind::MemSample && e.as<MemSampleEvent>().device == 0) allocated.push_back(e.as<MemSampleEvent>().value);
    if (e.kind != EventKind::Alloc && e.kind != EventKind::FreeRequested) continue;
    const auto b = e.as<MemBlockEvent>();
    if (b.device == kHostDevice) host.push_back(b.addr());
    else (e.kind == EventKind::Alloc ? gpu_allocs : gpu_frees).push_back(b.addr());
  }
  REQUIRE(gpu_allocs.size() == 2);
  REQUIRE(gpu_frees.size() == 3);
  CHECK(gpu_allocs[0] != gpu_allocs[1]);
  CHECK(gpu_frees[0] == gpu_allocs[1]);  // the latest live block of its size
  CHECK(gpu_frees[2] == gpu_allocs[0]);
  CHECK(gpu_frees[1] != gpu_allocs[0]);  // 30 bytes from before the trace: a block of its own
  CHECK(gpu_frees[1] != gpu_allocs[1]);
  REQUIRE(host.size() == 1);
  CHECK(allocated == std::vector<uint64_t>{130, 230, 130, 100, 0});  // live bytes, the 30 included
}

TEST_CASE("kineto: a file cut short keeps every complete event and says where it stopped", "[kineto]") {
  const std::string full = kTrace;
  const size_t cut = full.find("gpu_memset");  // inside the memset event
  const KinetoTrace k = read_kineto_buffer(full.substr(0, cut), "cut.json");
  CHECK(k.info.truncated);
  CHECK(k.info.trace_events == 7);
  CHECK(k.info.truncation.find("cut.json") != std::string::npos);
  CHECK(k.info.truncated_at == full.rfind('}', cut) + 1);
  CHECK(kinds(k.trace)[EventKind::Memcpy] == 1);
  CHECK(kinds(k.trace)[EventKind::Memset] == 0);

  SECTION("gzip, whole and cut short") {
    const std::string whole = temp_path("whole.json.gz"), cut_gz = temp_path("cut.json.gz");
    write_gzip(whole, full);
    const KinetoTrace g = read_kineto(whole);
    CHECK(g.info.gzip);
    CHECK(!g.info.truncated);
    CHECK(g.trace.events.size() == read_kineto_buffer(full, "x").trace.events.size());
    std::ifstream in(whole, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(cut_gz, std::ios::binary) << bytes.substr(0, bytes.size() * 2 / 3);
    const KinetoTrace c = read_kineto(cut_gz);
    CHECK(c.info.truncated);
    CHECK(c.info.trace_events < g.info.trace_events);
    std::remove(whole.c_str());
    std::remove(cut_gz.c_str());
  }
}

// Under ASan (scripts/test.sh runs the unit tests with detect_leaks=1) this also holds that the
// producer thread ends zlib's state when it throws: it leaked 7 KiB per corrupt file before.
TEST_CASE("kineto: corrupt gzip data is an error naming where, and the file is read again alike", "[kineto]") {
  const std::string path = temp_path("corrupt.json.gz");
  write_gzip(path, kTrace);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (size_t i = 20; i < bytes.size() - 8; ++i) bytes[i] = char(~bytes[i]);  // the deflate data, not the header
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  for (int round = 0; round < 2; ++round)
    CHECK_THROWS_WITH(read_kineto(path), Catch::Contains("gzip data corrupt near compressed byte"));
  std::remove(path.c_str());
}

TEST_CASE("kineto: a gzip-compressed snapshot pickle is named as such, not as JSON that is no object", "[kineto]") {
  const std::string path = temp_path("snapshot.pickle.gz");
  write_gzip(path, std::string("\x80\x04\x95", 3) + std::string(64, '\0'));
  CHECK_THROWS_WITH(read_kineto(path), Catch::Contains("a pickle inside gzip (a compressed PyTorch memory snapshot?)"));
  std::remove(path.c_str());
}

TEST_CASE("kineto: a quote lost in the middle is broken JSON, not a file cut short", "[kineto]") {
  // Note [Corrupt, not cut short] (json_splitter.cpp): read as a truncation, everything after the
  // lost quote was dropped with no error.
  std::string broken = kTrace;
  const size_t at = broken.find("\"Memset (Device)\"");
  broken.erase(at, 1);
  try {
    read_kineto_buffer(broken, "broken.json");
    FAIL("accepted");
  } catch (const TraceError& e) {
    CHECK_THAT(e.what(), Catch::Contains("broken.json") && Catch::Contains("broken JSON"));
  }
  // Inside one element, on one line: that element is corrupt, not a value to skip.
  std::string colon = kTrace;
  colon.erase(colon.find("\"Memset (Device)\"") - 2, 1);  // "name": "Memset..." loses its colon
  try {
    read_kineto_buffer(colon, "colon.json");
    FAIL("accepted");
  } catch (const TraceError& e) {
    CHECK_THAT(e.what(), Catch::Contains("colon.json: traceEvents element") && Catch::Contains("broken JSON"));
  }
}

TEST_CASE("kineto: in a one-line file, a stray quote far from the end is corrupt, a cut near it is not", "[kineto]") {
  // See Note [Corrupt, not cut short]: no newline to find, so the unclosed event's length decides.
  std::string line = R"({"traceEvents": [)";
  for (int i = 0; i < 8000; ++i)
    line += std::string(i ? ", " : "") + R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": )" +
            std::to_string(10 * i) + R"(, "dur": 1})";
  line += "]}";
  REQUIRE(line.size() > (600u << 10));
  const size_t middle = line.find("aten::mm", line.size() / 3);
  const KinetoTrace cut = read_kineto_buffer(line.substr(0, line.size() - 40), "cut.json");  // inside the last event
  CHECK(cut.info.truncated);
  CHECK(cut.info.trace_events == 7999);
  std::string stray = line;
  stray.insert(middle, "\"");
  try {
    read_kineto_buffer(stray, "stray.json");
    FAIL("accepted");
  } catch (const TraceError& e) {
    CHECK_THAT(e.what(), Catch::Contains("stray.json") && Catch::Contains("without closing"));
  }
}

TEST_CASE("kineto: a file that is only the events array, or starts with a byte order mark, reads as the object", "[kineto]") {
  // Note [A trace that is only its events] (json_splitter.cpp): torch 1.8 nightlies wrote the array alone.
  const std::string events =
      R"([{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"device": 0, "stream": 7}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 20}])";
  const KinetoTrace object = read_kineto_buffer("{\"traceEvents\": " + events + "}", "object.json");
  for (const std::string& text : {events, "\xEF\xBB\xBF" + events, "\xEF\xBB\xBF{\"traceEvents\": " + events + "}"}) {
    const KinetoTrace k = read_kineto_buffer(text, "other.json");
    CHECK(k.info.trace_events == 2);
    CHECK(!k.info.truncated);
    CHECK(kinds(k.trace) == kinds(object.trace));
  }
}

TEST_CASE("kineto: bytes after the trace's JSON are an error naming them, whitespace is not", "[kineto]") {
  const std::string trace = R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5}]})";
  CHECK(read_kineto_buffer(trace + "\n  \n", "spaces.json").info.trace_events == 1);
  CHECK_THROWS_WITH(read_kineto_buffer(trace + "\nGARBAGE", "joined.json"),
                    Catch::Contains("more data after the trace's JSON object") && Catch::Contains("joined.json"));
  const std::string events = R"([{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5}])";
  CHECK_THROWS_WITH(read_kineto_buffer(events + "{}", "array.json"), Catch::Contains("more data after the trace's JSON array"));
}

TEST_CASE("kineto: what cannot be read as it stands is named in the skip list", "[kineto]") {
  const KinetoTrace k = read_kineto_buffer(R"({"distributedInfo": {"rank": "three"}, "deviceProperties": 7, "traceEvents": [
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1, "args": {"Device Type": 1, "Device Id": 300, "Bytes": 100}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 2, "args": {"Device Type": 1, "Device Id": 0, "Bytes": "100"}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 3, "args": {"Device Type": 1, "Device Id": 0, "Bytes": 64}},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"device": 999, "stream": 7}}]})",
                                           "skips.json");
  const auto& skipped = k.info.skipped;
  CHECK(skipped.count("[memory] event on a device id outside 0-254") == 1);
  CHECK(skipped.count("[memory] event without Bytes (missing, or not an integer in range)") == 1);
  CHECK(skipped.count("distributedInfo rank not an integer (read as rank 0)") == 1);
  CHECK(skipped.count("top-level 'deviceProperties' is not an array (not used)") == 1);
  CHECK(skipped.count("GPU events on a device above 254 (read as device 254)") == 1);
  CHECK(k.info.memory_events == 1);  // only the readable one, on device 0
}

TEST_CASE("kineto: any JSON value, after any leading whitespace, goes to the torch.profiler reader", "[kineto]") {
  // So that JSON which is not a trace is called that, not a .mct file with a bad magic.
  const auto dir = std::filesystem::temp_directory_path() / ("memcomm-candidate-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto candidate = [&](const std::string& text) {
    const auto p = dir / "f.json";
    std::ofstream(p, std::ios::binary) << text;
    return is_kineto_candidate(p.string());
  };
  for (const std::string& json : {std::string("\"a string\""), std::string("42"), std::string("-1"), std::string("null"),
                                  std::string("true"), std::string(5000, ' ') + "{\"traceEvents\": []}",
                                  std::string("\xFF\xFE{\0", 4), std::string("\0{", 2)}) {  // UTF-16: named as such
    INFO(json.substr(0, 20));
    CHECK(candidate(json));
  }
  for (const std::string& other : {std::string(""), std::string("   \n"), std::string("MEMCTRC\x1a"),
                                   std::string("\0\x01", 2), std::string("x{"), std::string("not a trace at all")}) {
    INFO(other);
    CHECK_FALSE(candidate(other));
  }
  // A byte-order mark alone: the scan began past the bytes read, at what the buffer held from before (here,
  // the previous file's '{'), and called the file a trace or not by that.
  CHECK(candidate("   {"));
  CHECK_FALSE(candidate("\xEF\xBB\xBF"));
  CHECK(candidate("\xEF\xBB\xBF" + std::string(5000, ' ') + "[]"));
  CHECK_THROWS_WITH(read_kineto_buffer("\"a string\"", "s.json"), Catch::Contains("neither a JSON object nor an array"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("kineto: the default communication kernels are NCCL's, RCCL's, DeepEP's and NVSHMEM's", "[kineto]") {
  std::string json = R"({"traceEvents": [)";
  const std::vector<std::pair<std::string, bool>> kernels = {
      {"ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgs)", true},
      // A one-rank communicator's average: NCCL runs this kernel in place of the collective.
      {"void (anonymous namespace)::oneRankReduce<FuncPreMulSum<float> >(void*, void*, unsigned long, unsigned long, bool)",
       true},
      {"void deep_ep::internode::dispatch<true>(int)", true},
      {"void dpsk::ep::internode::combine<false>(int)", true},  // DeepSeek's profile-data traces
      {"void deep_ep::intranode::notify_dispatch<8>(int)", true},
      {"void deep_ep::internode_ll::dispatch<false>(int)", true},
      // DeepEP's layout kernel counts tokens on its own GPU: it was listed as an all-to-all.
      {"void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)", false},
      {"void deep_ep::layout::get_dispatch_layout<256>(long const*, int*)", false},
      {"nvshmemi_transfer_rma_kernel", true},
      {"void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_gemm>(int)", false},
      {"void at::native::vectorized_elementwise_kernel<4>(int)", false}};
  for (size_t i = 0; i < kernels.size(); ++i)
    json += std::string(i ? "," : "") + R"({"ph": "X", "cat": "kernel", "name": ")" + kernels[i].first +
            R"(", "pid": 0, "tid": 7, "ts": )" + std::to_string(10 * (i + 1)) +
            R"(, "dur": 5, "args": {"device": 0, "stream": 7}})";
  const KinetoTrace k = read_kineto_buffer(json + "]}", "comm.json");
  std::vector<bool> comm;
  for (const Event& e : k.trace.events)
    if (e.kind == EventKind::Kernel) comm.push_back(e.as<ComputeEvent>().sub == 1);
  REQUIRE(comm.size() == kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    INFO(kernels[i].first);
    CHECK(comm[i] == kernels[i].second);
  }
}

TEST_CASE("kineto: a communication kernel without its collective's name takes it from the host's nccl: annotation", "[kineto]") {
  // Note [Collectives named by their host annotation] (converter.cpp): NCCL runs an all-to-all as
  // SendRecv kernels, and older traces name no collective on the kernel.
  const std::string json = R"json({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "nccl:all_to_all", "pid": 1, "tid": 1, "ts": 100, "dur": 50},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 110, "dur": 5, "args": {"correlation": 7}},
    {"ph": "X", "cat": "kernel", "name": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)", "pid": 0, "tid": 9, "ts": 120, "dur": 30,
     "args": {"device": 0, "stream": 9, "correlation": 7}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 200, "dur": 5, "args": {"correlation": 8}},
    {"ph": "X", "cat": "kernel", "name": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)", "pid": 0, "tid": 9, "ts": 210, "dur": 30,
     "args": {"device": 0, "stream": 9, "correlation": 8}},
    {"ph": "X", "cat": "user_annotation", "name": "nccl:_reduce_scatter_base", "pid": 1, "tid": 1, "ts": 300, "dur": 50},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 310, "dur": 5, "args": {"correlation": 9}},
    {"ph": "X", "cat": "kernel", "name": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)", "pid": 0, "tid": 9, "ts": 320, "dur": 30,
     "args": {"device": 0, "stream": 9, "correlation": 9}}]})json";
  const KinetoTrace k = read_kineto_buffer(json, "a2a.json");
  std::vector<CollOp> ops;
  for (const Event& e : k.trace.events)
    if (e.kind == EventKind::CollStart) ops.push_back(e.as<CollectiveEvent>().op);
  CHECK(ops == std::vector<CollOp>{CollOp::AllToAll, CollOp::Send, CollOp::ReduceScatter});  // the second: no annotation
  // NCCL moves an all-to-all as bytes: its kernel's _int8_t is no element type of the tensors; nor is it
  // of a reduction an old NCCL ran as SendRecv kernels (TorchRec's reduce-scatter).
  for (const Event& e : k.trace.events)
    if (e.kind == EventKind::CollStart) CHECK(e.as<CollectiveEvent>().dtype == DType::Unknown);
}

TEST_CASE("kineto: a communication kernel without a size takes its host nccl: annotation's shapes", "[kineto]") {
  // See Note [Collectives named by their host annotation]: facebookresearch/param's DLRM traces name no
  // "In msg nelems" on their NCCL kernels, but record_shapes put the inputs on the annotations; the
  // report said no collective recorded its size.
  const std::string json = R"json({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 1, "tid": 1, "ts": 100, "dur": 50,
     "args": {"Input Dims": [[394241]], "Input type": ["float"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 110, "dur": 5, "args": {"correlation": 7}},
    {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "pid": 0, "tid": 9, "ts": 120, "dur": 30,
     "args": {"device": 0, "stream": 9, "correlation": 7}},
    {"ph": "X", "cat": "user_annotation", "name": "nccl:all_to_all", "pid": 1, "tid": 1, "ts": 200, "dur": 50,
     "args": {"Input Dims": [[48, 16]], "Input type": ["long int"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 210, "dur": 5, "args": {"correlation": 8}},
    {"ph": "X", "cat": "kernel", "name": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)", "pid": 0, "tid": 9, "ts": 220, "dur": 30,
     "args": {"device": 0, "stream": 9, "correlation": 8}},
    {"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 1, "tid": 1, "ts": 300, "dur": 50,
     "args": {"Input Dims": [[10]], "Input type": ["float"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 310, "dur": 5, "args": {"correlation": 9}},
    {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "pid": 0, "tid": 9, "ts": 320, "dur": 30,
     "args": {"device": 0, "stream": 9, "correlation": 9, "In msg nelems": 64, "Out msg nelems": 64, "dtype": "Float"}}]})json";
  const KinetoTrace k = read_kineto_buffer(json, "sizes.json");
  std::vector<std::tuple<CollOp, DType, uint64_t>> colls;
  for (const Event& e : k.trace.events)
    if (e.kind == EventKind::CollStart) {
      const auto c = e.as<CollectiveEvent>();
      colls.emplace_back(c.op, c.dtype, c.bytes());
    }
  CHECK(colls == std::vector<std::tuple<CollOp, DType, uint64_t>>{{CollOp::AllReduce, DType::F32, 394241u * 4},
                                                                   {CollOp::AllToAll, DType::I64, 48u * 16 * 8},
                                                                   {CollOp::AllReduce, DType::F32, 64u * 4}});  // the kernel's own
}

TEST_CASE("kineto: a DataLoader's __next__ is data wait, and gloo: ops are collectives", "[kineto]") {
  // Note [Phases a torch.profiler trace names] (converter.cpp)
  const std::string json = R"json({"distributedInfo": {"backend": "gloo", "rank": 1, "world_size": 2}, "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 100, "dur": 200},
    {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "pid": 1, "tid": 1, "ts": 100, "dur": 40},
    {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1, "ts": 150, "dur": 5},
    {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 9, "ts": 152, "dur": 30},
    {"ph": "X", "cat": "user_annotation", "name": "gloo:barrier", "pid": 1, "tid": 9, "ts": 200, "dur": 10},
    {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#", "pid": 1, "tid": 1, "ts": 250, "dur": 5}]})json";
  const KinetoTrace k = read_kineto_buffer(json, "gloo.json");
  std::map<std::string, Phase> phases;
  for (const Event& e : k.trace.events)
    if (e.kind == EventKind::RangeBegin) phases[std::string(k.trace.name(e.as<RangeEvent>().name))] = e.as<RangeEvent>().phase;
  CHECK(phases.at("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__") == Phase::DataWait);
  CHECK(phases.at("gloo:all_reduce") == Phase::Comm);
  CHECK(phases.at("c10d::allreduce_") == Phase::Comm);  // the call on the main thread that issued it
  CHECK(phases.at("enumerate(DataLoader)#") == Phase::Annotation);  // a record_function label, no wait
  std::vector<std::pair<CollOp, int64_t>> colls;
  for (const Event& e : k.trace.events)
    if (e.kind == EventKind::CollStart) colls.emplace_back(e.as<CollectiveEvent>().op, e.ts);
  REQUIRE(colls.size() == 2);
  CHECK(colls[0].first == CollOp::AllReduce);
  CHECK(colls[1].first == CollOp::Barrier);
  CHECK(colls[1].second - colls[0].second == 48'000);
  CHECK(k.info.host_collectives == 2);
  CHECK(k.info.data_waits == 1);
}

TEST_CASE("kineto: a CPU trace's Gloo waits are exposed communication with their sizes, and send/recv are no collectives",
          "[kineto]") {
  // A Gloo run's shape (torch 2.11): the profiler's own window span ("Trace"), the Python frame the
  // main thread's operators ran under (with_stack=True), those operators, a 400 us all_reduce on a
  // Gloo thread that nothing beside it hides, and a send on the main thread. The window span and the
  // frame made every CPU trace 100 % compute; the send was a collective.
  const std::string json = R"json({"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 2}, "traceEvents": [
    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": 1, "tid": "PyTorch Profiler", "ts": 0, "dur": 1000},
    {"ph": "X", "cat": "python_function", "name": "train.py(9): <module>", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1, "ts": 100, "dur": 10},
    {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 9, "ts": 105, "dur": 400,
     "args": {"Input type": ["c10::Half"], "Input Strides": [[10, 1]], "Input Dims": [[10, 10]]}},
    {"ph": "X", "cat": "cpu_op", "name": "c10d::send", "pid": 1, "tid": 1, "ts": 600, "dur": 100},
    {"ph": "X", "cat": "user_annotation", "name": "gloo:send", "pid": 1, "tid": 1, "ts": 600, "dur": 100},
    {"ph": "X", "cat": "user_annotation", "name": "gloo:all_gather", "pid": 1, "tid": 9, "ts": 800, "dur": 10,
     "args": {"Input type": ["float"], "Input Dims": [[5]]}}]})json";
  const std::string path = temp_path("gloo_window.json");
  std::ofstream(path, std::ios::binary) << json;
  const Analysis a = analyze(TraceSet::load({path}));
  std::remove(path.c_str());
  REQUIRE(a.ranks.size() == 1);
  const Breakdown& b = a.ranks[0].breakdown;
  CHECK(b.compute_ns == 100'000);  // aten::mm: c10d:: calls issue communication, and c10d::send waits in gloo:send
  CHECK(b.comm_total_ns == 410'000);
  CHECK(b.exposed_comm_ns == 410'000);  // the c10d::allreduce_ call beside it computes nothing
  // With record_shapes, a gloo: span's Input Dims and Input type give its size; an all-gather names
  // this rank's part of the gathered whole.
  REQUIRE(a.collectives.size() == 2);
  CHECK(a.collectives[0].op == CollOp::AllReduce);
  CHECK(a.collectives[0].dtype == DType::F16);
  CHECK(a.collectives[0].bytes == 200);
  CHECK(a.collectives[1].op == CollOp::AllGather);
  CHECK(a.collectives[1].bytes == 5 * 4 * 2);
}

TEST_CASE("kineto: collectives that pair different sizes across ranks are marked as not lining up", "[kineto]") {
  // Note [Collectives the ranks disagree on] (analysis.cpp): rank 1's first all-reduce is another
  // group's (its own size), so order pairs it with rank 0's; the second pair agrees.
  const auto rank_json = [](int rank, int first_elements) {
    return fmt::format(R"json({{"distributedInfo": {{"backend": "gloo", "rank": {}, "world_size": 2}}, "traceEvents": [
      {{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 9, "ts": 100, "dur": 50,
        "args": {{"Input type": ["float"], "Input Dims": [[{}]]}}}},
      {{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 9, "ts": 200, "dur": 50,
        "args": {{"Input type": ["float"], "Input Dims": [[64]]}}}}]}})json", rank, first_elements);
  };
  const std::string p0 = temp_path("pair0.json"), p1 = temp_path("pair1.json");
  std::ofstream(p0, std::ios::binary) << rank_json(0, 1000);
  std::ofstream(p1, std::ios::binary) << rank_json(1, 3000);
  const Analysis a = analyze(TraceSet::load({p0, p1}));
  std::remove(p0.c_str());
  std::remove(p1.c_str());
  REQUIRE(a.collectives.size() == 2);
  CHECK(a.collectives[0].ranks_disagree);
  CHECK_FALSE(a.collectives[1].ranks_disagree);
  CHECK(a.disagreeing_collectives == 1);
  CHECK_THAT(analysis_to_text(a), Catch::Contains("warning: 1 of 2 matched collectives (marked !) name different ops or sizes"));
}

TEST_CASE("kineto: an execution trace (ExecutionTraceObserver) is named as such", "[kineto]") {
  CHECK_THROWS_WITH(read_kineto_buffer(R"({"schema": "1.1.1-chakra.0.0.4", "pid": 7, "nodes": [{"id": 1}]})", "et.json"),
                    Catch::Contains("et.json: a PyTorch execution trace"));
}

TEST_CASE("kineto: a memory snapshot written as JSON is named as such", "[kineto]") {
  // json.dump of torch.cuda.memory._snapshot() was "not a torch.profiler trace (no traceEvents array)".
  CHECK_THROWS_WITH(read_kineto_buffer(R"({"segments": [], "device_traces": [[]]})", "snap.json"),
                    Catch::Contains("snap.json: a PyTorch memory snapshot written as JSON"));
}

TEST_CASE("kineto: JSON saved in UTF-16 is named as such", "[kineto]") {
  const std::string utf16(std::string("\xFF\xFE{\0}\0", 6));  // PowerShell's `>` writes UTF-16 LE with a BOM
  CHECK_THROWS_WITH(read_kineto_buffer(utf16, "ps.json"), Catch::Contains("ps.json: JSON in UTF-16 or UTF-32"));
  CHECK_THROWS_WITH(read_kineto_buffer(std::string("{\0}\0", 4), "nobom.json"), Catch::Contains("UTF-16"));
}

TEST_CASE("kineto: JSON of another tool, none of whose events torch.profiler writes, is refused", "[kineto]") {
  // Note [JSON of another tool] (converter.cpp): Triton Inference Server's async events.
  const std::string json = R"json([
    {"ph": "b", "cat": "request", "name": "infer", "pid": 1, "tid": 1, "ts": 100, "id": 1},
    {"ph": "e", "cat": "request", "name": "infer", "pid": 1, "tid": 1, "ts": 200, "id": 1},
    {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "server"}}])json";
  CHECK_THROWS_WITH(read_kineto_buffer(json, "triton.json"),
                    Catch::Contains("triton.json: not a torch.profiler trace: none of its 3 traceEvents") &&
                        Catch::Contains("ph \"b\""));
  // A real trace cut short after its metadata, before any timed event, is a file cut short.
  const KinetoTrace cut = read_kineto_buffer(R"({"traceEvents": [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "python"}},
    {"ph": "X", "cat": "cpu_op", "na)", "cut.json");
  CHECK(cut.info.truncated);
  // An empty traceEvents list was read as an empty run (exit 0, a time axis of -500..500 ns).
  CHECK_THROWS_WITH(read_kineto_buffer(R"({"traceEvents": []})", "none.json"),
                    Catch::Contains("none.json: its traceEvents list is empty"));
  // A torch.profiler trace that recorded nothing but its own span still reads.
  CHECK(read_kineto_buffer(R"j({"traceEvents": [{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": 1, "tid": 1, "ts": 5, "dur": 9}]})j",
                           "empty-profile.json").info.trace_events == 1);
}

TEST_CASE("kineto: a --comm-kernels pattern searches kernel names of any length, and any pattern ends", "[kineto]") {
  // See Note [A pattern the user writes] (comm_kernels.cpp): std::regex overflowed the stack on a long name or
  // a long pattern, and backtracked for minutes on '.*.*.*x'.
  KinetoOptions opt;
  const auto comm_kernels = [&](const std::string& name) {
    const std::string json = R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": ")" + name +
                             R"(", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"device": 0, "stream": 7}}]})";
    return read_kineto_buffer(json, "long.json", opt).info.comm_kernels;
  };
  opt.comm_kernels = ".*nccl";
  CHECK(comm_kernels("nccl" + std::string(300'000, 'x')) == 1);
  CHECK(comm_kernels(std::string(300'000, 'x') + "nccl") == 1);
  opt.comm_kernels = ".*.*.*y";
  CHECK(comm_kernels(std::string(300'000, 'x')) == 0);
  opt.comm_kernels = std::string(1000, 'x');
  CHECK(comm_kernels(std::string(300'000, 'x')) == 1);
  opt.comm_kernels = std::string(1001, 'x');
  CHECK_THROWS_WITH(comm_kernels("nccl"), Catch::Contains("--comm-kernels: a pattern of 1001 characters: at most 1000"));
  opt.comm_kernels = "(nccl";
  CHECK_THROWS_WITH(comm_kernels("nccl"), Catch::Contains("--comm-kernels: '(nccl' is not a valid regular expression"));
}

TEST_CASE("kineto: a rank that is no whole number, or not below world_size, is named in the skip list", "[kineto]") {
  const auto skipped = [](const std::string& info) {
    return read_kineto_buffer(R"({"distributedInfo": )" + info + R"(, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 5, "dur": 1}]})",
                              "rank.json").info.skipped;
  };
  CHECK(skipped(R"({"rank": 1.7, "world_size": 2})").count("distributedInfo rank not an integer (read as rank 0)") == 1);
  CHECK(skipped(R"({"rank": 5, "world_size": 2})").count("distributedInfo rank not below its world_size (both used as given)") == 1);
  CHECK(skipped(R"({"rank": 1.0, "world_size": 2})").empty());
  CHECK(skipped(R"({"rank": 0, "world_size": 2.5})").count("distributedInfo world_size not an integer (not used)") == 1);
}

TEST_CASE("kineto: timestamps that are not Unix time keep their own origin", "[kineto]") {
  // kUnixTimeFloorNs (converter.hpp): microseconds since boot (older Kineto) or from 0 used to be
  // moved 1.6e18 ns before the shared origin and clamped, every event onto one time.
  for (const char* base : {"", "88437691"}) {  // from 0, and about a day after boot
    INFO(base);
    const std::string json = std::string(R"({"traceEvents": [)") +
        R"({"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": )" + base + R"(100, "dur": 5, "args": {"device": 0, "stream": 7}},)" +
        R"({"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 7, "ts": )" + base + R"(300, "dur": 5, "args": {"device": 0, "stream": 7}}]})";
    const KinetoTrace k = read_kineto_buffer(json, "boot.json");
    std::vector<int64_t> ts;
    for (const Event& e : k.trace.events)
      if (e.kind == EventKind::Kernel) ts.push_back(e.ts);
    REQUIRE(ts.size() == 2);
    CHECK(ts[1] - ts[0] == 200'000);
  }
}

TEST_CASE("kineto: input that is not a torch.profiler trace is refused by name", "[kineto]") {
  for (const char* bad : {"", "[1, 2, 3]", "{\"a\": 1}", "hello", "{\"traceEvents\": 5}", "{\"x\": [1,2"}) {
    INFO(bad);
    try {
      read_kineto_buffer(bad, "bad.json");
      FAIL("accepted");
    } catch (const TraceError& e) {
      CHECK(std::string(e.what()).find("bad.json") != std::string::npos);
      CHECK(std::string(e.what()).find("torch.profiler trace") != std::string::npos);
    }
  }
}

TEST_CASE("kineto: bad values are counted skips or clear errors, never crashes", "[kineto]") {
  const char* t = R"json({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "nan", "pid": 1, "tid": 1, "ts": NaN, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "huge", "pid": 1, "tid": 1, "ts": 1e300, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "bigint", "pid": 1, "tid": 1, "ts": 123456789012345678901234567890, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "negative", "pid": 1, "tid": 1, "ts": 5, "dur": -3},
    {"ph": "X", "cat": "cpu_op", "name": "no dur", "pid": 1, "tid": 1, "ts": 5},
    {"ph": "B", "cat": "cpu_op", "name": "begin", "pid": 1, "tid": 1, "ts": 5},
    7,
    {"ph": "X", "cat": "cpu_op", "name": "good", "pid": 1, "tid": 1, "ts": 5, "dur": 1}
  ]})json";
  const KinetoTrace k = read_kineto_buffer(t, "t.json");
  uint64_t skipped = 0;
  for (const auto& [why, n] : k.info.skipped) skipped += n;
  CHECK(skipped == 7);
  CHECK(k.info.skipped.count("negative duration") == 1);
  CHECK(kinds(k.trace)[EventKind::RangeBegin] == 1);

  std::string deep = "{\"traceEvents\": [{\"args\": ";
  deep += std::string(100000, '[');
  try {
    read_kineto_buffer(deep, "deep.json");
    FAIL("accepted");
  } catch (const TraceError& e) {
    CHECK(std::string(e.what()).find("nested deeper") != std::string::npos);
  }
}

TEST_CASE("kineto: the real traces in ../shared load with the counts SOURCES.md gives", "[kineto][shared]") {
  const std::string dir = shared_kineto_dir();
  const std::string ref_path = dir + "/hta-reference.json";
  if (!std::filesystem::exists(ref_path)) MEMCOMM_SKIP_TEST("no ../shared/traces/kineto");
  const nlohmann::json ref = memcomm::test::read_json(ref_path);
  int files = 0;
  for (const auto& [set, s] : ref.at("sets").items()) {
    for (const auto& [file, f] : s.at("files").items()) {
      INFO(set << "/" << file);
      const KinetoTrace k = read_kineto(dir + "/" + s.at("dir").get<std::string>() + file);
      ++files;
      CHECK(k.info.trace_events == f.at("events").get<uint64_t>());
      CHECK(!k.info.truncated);
      CHECK(k.info.skipped.empty());
      uint64_t kernels = 0;
      for (const Event& e : k.trace.events) kernels += e.kind == EventKind::Kernel;
      CHECK(kernels == f.at("gpu_kernels(cat=kernel)").get<uint64_t>());
      CHECK(k.info.comm_kernels == f.at("nccl_kernels").get<uint64_t>());
      CHECK(k.info.memory_events == f.at("memory_instant_events").get<uint64_t>());
      if (f.at("distributedInfo").is_object() && f.at("distributedInfo").contains("rank"))
        CHECK(k.trace.rank == f.at("distributedInfo").at("rank").get<uint32_t>());
    }
  }
  CHECK(files == 7);
}
