// torch.profiler (Kineto) traces in the viewer's model: hand-written ones whose every event is
// known (lanes per host thread and stream, steps, collectives matched across the files of a run,
// memory from [memory] events, a file cut short, JSON that is no trace), and the real
// df_index_resolver trace, whose memory curves must be its [memory] events' totals, computed here
// independently with Python's gzip and json.
#include "kineto_traces.hpp"
#include "report_parity.hpp"

#include <memcomm/view/analysis.hpp>
#include <memcomm/view/loader.hpp>

#include <algorithm>
#include <cstdlib>
#include <sstream>

using namespace memcomm::view;

namespace {

const Lane* find_lane(const RankData& rd, LaneKind kind, const std::string& name) {
  for (const auto& l : rd.lanes)
    if (l.kind == kind && l.name == name) return &l;
  return nullptr;
}

std::vector<std::string> names(const Timeline& tl, const SpanRow& row) {
  std::vector<std::string> out;
  for (const Span& s : row) out.push_back(tl.strings.get(s.name));
  return out;
}

constexpr TimeNs kUs = 1000;
constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

TEST_CASE("a torch.profiler trace loads into thread and stream lanes, steps, collectives and memory", "[unit][viewer]") {
  const std::string path = memcomm::test::temp_path("memcomm_viewer_kineto_tests", "rank0.json");
  kineto_traces::write(path, kineto_traces::json(0, 1600));
  std::string error;
  CHECK(detect_input(path, error) == InputKind::KinetoTrace);
  Timeline tl;
  REQUIRE(load_file(path, tl, error));
  REQUIRE(tl.ranks.size() == 1);
  const RankData& rd = tl.ranks[0];
  CHECK(rd.rank == 0);
  // The host thread's lane, named by its thread_name: the op with its launch nested in it.
  const Lane* host = find_lane(rd, LaneKind::Nvtx, "python main");
  REQUIRE(host != nullptr);
  REQUIRE(host->rows.size() == 2);
  CHECK(names(tl, host->rows[0]) == std::vector<std::string>{"aten::mm"});
  CHECK(names(tl, host->rows[1]) == std::vector<std::string>{"cudaLaunchKernel"});
  // The GPU annotation on its own lane; the kernels on their streams' lanes.
  const Lane* annotations = find_lane(rd, LaneKind::Nvtx, "GPU 0 stream 7 annotations");
  REQUIRE(annotations != nullptr);
  CHECK(names(tl, annotations->rows[0]) == std::vector<std::string>{"fwd"});
  const Lane* gemm = find_lane(rd, LaneKind::Kernel, "GPU 0 stream 7");
  REQUIRE(gemm != nullptr);
  REQUIRE(gemm->span_count() == 1);
  CHECK(gemm->rows[0][0].end - gemm->rows[0][0].start == 300 * kUs);
  CHECK_FALSE(gemm->comm_kernels);
  const Lane* nccl = find_lane(rd, LaneKind::Kernel, "GPU 0 stream 20");
  REQUIRE(nccl != nullptr);
  CHECK(nccl->comm_kernels);
  // ProfilerStep#7 is step 7; the NCCL kernel is its communication, which no compute overlaps.
  const auto steps = step_table(tl);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].step == 7);
  CHECK(steps[0].end - steps[0].start == 1000 * kUs);
  CHECK(steps[0].comm == 200 * kUs);
  CHECK(steps[0].exposed_comm == 200 * kUs);
  REQUIRE(rd.collectives.size() == 1);
  CHECK(tl.strings.get(rd.collectives[0].op) == "all_reduce");
  CHECK(rd.collectives[0].bytes == 4096);
  // Memory: the block events of the [memory] events, and their totals as the curves.
  CHECK(rd.alloc_events.size() == 2);  // the alloc and the free (its request, at once, is not kept)
  const CounterSeries* allocated = rd.counter("allocated");
  const CounterSeries* active = rd.counter("active");
  const CounterSeries* reserved = rd.counter("reserved");
  REQUIRE((allocated && active && reserved));
  CHECK(allocated->global_max() == 5 * kMiB);
  CHECK(active->global_max() == 5 * kMiB);
  CHECK(reserved->global_max() == 8 * kMiB);
  CHECK(steps[0].peak_allocated == 5 * kMiB);
}

TEST_CASE("the torch.profiler files of a run share one timeline, their NCCL collectives matched", "[unit][viewer]") {
  const std::string r0 = memcomm::test::temp_path("memcomm_viewer_kineto_tests", "pair.rank0.json");
  const std::string r1 = memcomm::test::temp_path("memcomm_viewer_kineto_tests", "pair.rank1.json");
  kineto_traces::write(r0, kineto_traces::json(0, 1600));
  kineto_traces::write(r1, kineto_traces::json(1, 1650));  // rank 1 arrives 50 us later
  BackgroundLoad load({r0, r1});
  const Timeline tl = load.take();
  CHECK(load.errors().empty());
  REQUIRE(tl.ranks.size() == 2);
  CHECK(tl.ranks[0].rank == 0);
  CHECK(tl.ranks[1].rank == 1);
  REQUIRE(tl.ranks[0].collectives.size() == 1);
  REQUIRE(tl.ranks[1].collectives.size() == 1);
  const Collective& c0 = tl.ranks[0].collectives[0];
  const Collective& c1 = tl.ranks[1].collectives[0];
  CHECK(c0.next_rank == 1);
  CHECK(c0.group_size == 2);
  CHECK_FALSE(c0.straggler);
  CHECK(c1.straggler);
  CHECK(c0.skew == 50 * kUs);
  CHECK(c0.time == 200 * kUs);  // from the last arrival (1650 us) to the last end (1850 us)
}

TEST_CASE("a torch.profiler trace's --range counts from its first event shown, not the recording window", "[unit][viewer]") {
  // The window ("PyTorch Profiler (0)") began a second before the first operator; the view starts at
  // the operator, and a range measured from the window's start kept nothing the view showed first.
  const std::string path = memcomm::test::temp_path("memcomm_viewer_kineto_tests", "window.json");
  std::ostringstream j;
  j << R"({"schemaVersion": 1, "traceEvents": [)"
    << R"J({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": 1, "tid": 1, "ts": 1000, "dur": 3000000},)J";
  for (int k = 0; k < 4; ++k)
    j << R"({"ph": "X", "cat": "cpu_op", "name": "op)" << k << R"(", "pid": 1, "tid": 1, "ts": )" << 1001000 + k * 500000
      << R"(, "dur": 1000})" << (k < 3 ? "," : "");
  j << "]}";
  kineto_traces::write(path, j.str());
  LoadOptions range;
  range.range_lo_s = 0;
  range.range_hi_s = 0.6;  // the first two operators
  Timeline tl;
  std::string error;
  REQUIRE(load_file(path, tl, error, nullptr, range));
  INFO(error);
  REQUIRE(tl.ranks.size() == 1);
  std::vector<std::string> ops;
  for (const Lane& l : tl.ranks[0].lanes)
    for (const SpanRow& row : l.rows)
      for (const std::string& n : names(tl, row)) ops.push_back(n);
  std::sort(ops.begin(), ops.end());
  CHECK(ops == std::vector<std::string>{"op0", "op1"});
}

TEST_CASE("a torch.profiler trace cut short loads up to its last complete event, with a warning", "[unit][viewer]") {
  const std::string full = kineto_traces::json(0, 1600);
  const std::string path = memcomm::test::temp_path("memcomm_viewer_kineto_tests", "cut.json");
  kineto_traces::write(path, full.substr(0, full.find("{\"ph\": \"X\", \"cat\": \"gpu_user_annotation\"") + 20));
  Timeline tl;
  std::string error;
  REQUIRE(load_file(path, tl, error));
  REQUIRE(tl.sources.size() == 1);
  CHECK(tl.sources[0].find("(truncated: ") != std::string::npos);
  REQUIRE(tl.ranks.size() == 1);
  CHECK(tl.ranks[0].collectives.empty());  // the NCCL kernel came after the cut
  BackgroundLoad load({path});
  load.take();
  CHECK(load.errors().empty());
  REQUIRE(load.warnings().size() == 1);
  CHECK(load.warnings()[0].find(path) != std::string::npos);
  CHECK(load.warnings()[0].find("ends early") != std::string::npos);
}

TEST_CASE("a gzipped torch.profiler trace loads as the plain one does", "[unit][viewer]") {
  const std::string path = memcomm::test::temp_path("memcomm_viewer_kineto_tests", "gz.json");
  kineto_traces::write(path, kineto_traces::json(0, 1600));
  REQUIRE(std::system(("gzip -kf " + path).c_str()) == 0);
  Timeline plain, gz;
  std::string error;
  REQUIRE(load_file(path, plain, error));
  CHECK(detect_input(path + ".gz", error) == InputKind::KinetoTrace);
  REQUIRE(load_file(path + ".gz", gz, error));
  CHECK(gz.event_count == plain.event_count);
  CHECK(gz.begin == plain.begin);
  CHECK(gz.end == plain.end);
}

TEST_CASE("the viewer opens what memcomm-trace opens: a trace after long white space, a legacy array trace",
          "[unit][viewer]") {
  // The viewer looked at 64 bytes for a '{'; the trace layer's rule (prof::is_kineto_candidate) reads
  // on through white space and takes torch.autograd.profiler's JSON array too.
  const std::string padded = memcomm::test::temp_path("memcomm_viewer_kineto_tests", "padded.json");
  const std::string plain_path = memcomm::test::temp_path("memcomm_viewer_kineto_tests", "unpadded.json");
  kineto_traces::write(plain_path, kineto_traces::json(0, 1600));
  kineto_traces::write(padded, std::string(5000, ' ') + "\n" + kineto_traces::json(0, 1600));
  Timeline plain, tl;
  std::string error;
  REQUIRE(load_file(plain_path, plain, error));
  CHECK(detect_input(padded, error) == InputKind::KinetoTrace);
  REQUIRE(load_file(padded, tl, error));
  CHECK(tl.event_count == plain.event_count);
  const std::string legacy = memcomm::test::temp_path("memcomm_viewer_kineto_tests", "legacy.json");
  kineto_traces::write(legacy, R"([{"name": "aten::mm", "ph": "X", "ts": 10, "dur": 40, "pid": 1, "tid": 1},
    {"name": "aten::add", "ph": "X", "ts": 60, "dur": 20, "pid": 1, "tid": 1}])");
  Timeline array;
  REQUIRE(load_file(legacy, array, error));
  CHECK(array.event_count == 2);  // its two operators
}

TEST_CASE("JSON that is not a torch.profiler trace is refused with a message naming the file", "[unit][viewer]") {
  const std::string path = memcomm::test::temp_path("memcomm_viewer_kineto_tests", "other.json");
  kineto_traces::write(path, R"({"hello": [1, 2, 3]})");
  Timeline tl;
  std::string error;
  CHECK_FALSE(load_file(path, tl, error));
  CHECK(error.find(path) != std::string::npos);
  CHECK(error.find("not a torch.profiler trace") != std::string::npos);
  const std::string gz = memcomm::test::temp_path("memcomm_viewer_kineto_tests", "garbage.json.gz");
  kineto_traces::write(gz, std::string("\x1f\x8b", 2) + "definitely not deflate");
  CHECK_FALSE(load_file(gz, tl, error));
  CHECK(error.find(gz) != std::string::npos);
}

TEST_CASE("df_index_resolver: the memory curves are the [memory] events' totals", "[unit][viewer]") {
  const std::string trace = kineto_traces::shared("df_index_resolver/df_index_resolver.json.gz");
  // Independently of memcomm's reader: the GPU's largest totals, and the block events the
  // allocations (Bytes > 0) and frees (Bytes < 0) of every device make.
  const std::string script = memcomm::test::temp_path("memcomm_viewer_kineto_tests", "memory_totals.py");
  kineto_traces::write(script, R"(import gzip, json, sys
ev = json.load(gzip.open(sys.argv[1]))["traceEvents"]
mem = [e["args"] for e in ev if e.get("name") == "[memory]"]
gpu = [a for a in mem if a.get("Device Type") == 1]
blocks = sum(1 for a in mem if a["Bytes"] != 0)
print(max(a["Total Allocated"] for a in gpu), max(a["Total Reserved"] for a in gpu), blocks)
)");
  std::string out;
  REQUIRE(memcomm::test::run_capture("python3 " + script + " " + trace, out, false) == 0);
  std::istringstream in(out);
  double max_allocated = 0, max_reserved = 0;
  std::size_t block_events = 0;
  REQUIRE(in >> max_allocated >> max_reserved >> block_events);
  REQUIRE(max_allocated > 0);
  Timeline tl;
  std::string error;
  REQUIRE(load_file(trace, tl, error));
  REQUIRE(tl.ranks.size() == 1);
  const RankData& rd = tl.ranks[0];
  CHECK(rd.alloc_events.size() == block_events);
  const CounterSeries* allocated = rd.counter("allocated");
  const CounterSeries* reserved = rd.counter("reserved");
  REQUIRE((allocated && reserved));
  CHECK(allocated->global_max() == max_allocated);
  CHECK(reserved->global_max() == max_reserved);
  // The step table's peaks are the curve's: the largest of them is the trace's.
  double step_peak = 0;
  for (const StepRow& r : step_table(tl)) step_peak = std::max(step_peak, r.peak_allocated);
  CHECK(step_peak == max_allocated);
  // A time range shows the same device's curves (the GPU's, whose first sample comes first), not
  // those of the first device sampled inside the range (the host's, 8 B at most).
  LoadOptions range;
  range.range_lo_s = 0.4;
  range.range_hi_s = 0.8;
  Timeline part;
  REQUIRE(load_file(trace, part, error, nullptr, range));
  REQUIRE(part.ranks.size() == 1);
  const CounterSeries* part_allocated = part.ranks[0].counter("allocated");
  REQUIRE(part_allocated != nullptr);
  CHECK(part_allocated->global_max() > 1e9);
  CHECK(part_allocated->global_max() <= max_allocated);
}

TEST_CASE("a memory profile's bytes from before its first event are held in the viewer too", "[unit][viewer]") {
  // Note [Bytes a memory profile never saw allocated] (trace/src/allocations.cpp): 1000 B were
  // allocated before the profile began; the trace allocates 512 B (Total Allocated 1512), then frees them.
  const auto mem = [](long long ts, int bytes, int total) {
    return R"({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": )" +
           std::to_string(ts) + R"(, "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": )" +
           std::to_string(bytes) + R"(, "Total Allocated": )" + std::to_string(total) + R"(, "Total Reserved": 2097152}})";
  };
  const std::string path = memcomm::test::temp_path("memcomm_viewer_tests", "before.pt.trace.json");
  kineto_traces::write(path, R"({"traceEvents": [)" + mem(1712195495406010, 512, 1512) + "," +
                                 mem(1712195495406020, -512, 1000) + "]}");
  Timeline tl;
  std::string error;
  REQUIRE(load_file(path, tl, error));
  REQUIRE(tl.ranks.size() == 1);
  CHECK(memcomm::prof::peak_live(tl.ranks[0].allocations).bytes == 1512);
  std::remove(path.c_str());
}
