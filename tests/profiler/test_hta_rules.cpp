// HTA's rules that the shared traces do not exercise (Note [HTA's figures] in
// memcomm/trace/hta.hpp), on a hand-made torch.profiler trace whose figures HolisticTraceAnalysis
// 0.5.0 gave (TraceAnalysis(trace_dir=...).get_temporal_breakdown() and get_comm_comp_overlap(),
// pandas 3): the last ProfilerStep taken from a GPU-side annotation that starts after the CPU's,
// a kernel without a correlation id kept by its ts, one whose launch is missing dropped, an
// "Event Sync" kept without one, two spans of a category HTA does not know but that carry a stream
// (MTIA's; a "dma_request" is memory, not compute), a "Context Sync" at stream -1 that is no GPU row at all (75 us that
// would change every figure), a "Stream Wait Event" counted as compute, a "Memcpy" that ends
// before it starts once rounded, and Unix-epoch float timestamps rounded through float64.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "memcomm/trace/hta.hpp"
#include "memcomm_test.hpp"
#include "trace_fixtures.hpp"

using namespace memcomm::prof;

namespace {

// One complete event at 1712195495406`at` us (`at`: the last three digits and the fraction).
std::string ev(const char* cat, const char* name, const char* at, const char* dur, const char* args) {
  const bool gpu = std::string(cat) != "user_annotation" && std::string(cat) != "cuda_runtime";
  return std::string(R"({"ph":"X","cat":")") + cat + R"(","name":")" + name + R"(","pid":)" + (gpu ? "0" : "1") +
         R"(,"tid":1,"ts":1712195495406)" + at + R"(,"dur":)" + dur + R"(,"args":{)" + args + "}}";
}

std::string hand_made_trace() {
  const std::string events[] = {
      ev("user_annotation", "ProfilerStep#1", "000.5", "100.25", ""),
      ev("user_annotation", "ProfilerStep#2", "100.75", "100.5", ""),
      ev("cuda_runtime", "cudaLaunchKernel", "010.125", "2", R"("correlation":1)"),
      ev("cuda_runtime", "cudaLaunchKernel", "020.5", "2", R"("correlation":2)"),
      ev("cuda_runtime", "cudaLaunchKernel", "030.25", "2", R"("correlation":3)"),
      ev("cuda_runtime", "cudaLaunchKernel", "110.125", "2", R"("correlation":4)"),
      ev("cuda_runtime", "cudaStreamWaitEvent", "120.5", "1", R"("correlation":5)"),
      ev("cuda_runtime", "cudaLaunchKernel", "150.5", "2", R"("correlation":6)"),
      ev("kernel", "void gemm<float>(float*)", "040.125", "20.875", R"("correlation":1,"stream":7,"device":0)"),
      ev("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "050.5", "30.25",
         R"("correlation":2,"stream":20,"device":0)"),
      ev("gpu_memcpy", "Memcpy DtoD (Device -> Device)", "061.25", "0.5", R"("correlation":3,"stream":7,"device":0)"),
      ev("kernel", "elementwise_kernel", "130.625", "0.625", R"("correlation":4,"stream":7,"device":0)"),
      ev("cuda_sync", "Stream Wait Event", "140.25", "9.875", R"("correlation":5,"stream":20,"device":0)"),
      ev("kernel", "ncclDevKernel_SendRecv(ncclDevKernelArgs)", "150.875", "25.5",
         R"("correlation":6,"stream":20,"device":0)"),
      ev("kernel", "relu_kernel", "160.125", "30.5", R"("correlation":6,"stream":7,"device":0)"),
      ev("kernel", "no_correlation_kernel", "090.75", "5.25", R"("stream":7,"device":0)"),
      ev("kernel", "no_launch_kernel", "095.25", "3.5", R"("correlation":99,"stream":7,"device":0)"),
      ev("cuda_sync", "Event Sync", "185.5", "4.25", R"("stream":7,"device":0)"),
      ev("cuda_sync", "Context Sync", "020.25", "75.5", R"("stream":-1,"device":0)"),  // no row: no stream
      ev("mtia_ccp_events", "dma_request", "033.5", "6.25", R"("correlation":3,"stream":30)"),  // memory, not compute
      ev("mtia_ccp_events", "pe_exe", "041.0", "3.5", R"("correlation":3,"stream":30)"),
      ev("gpu_user_annotation", "ProfilerStep#2", "140.5", "10.25", R"("device":0)"),
  };
  std::string json = R"({"schemaVersion":1,"distributedInfo":{"rank":0,"world_size":1},"traceEvents":[)";
  for (const std::string& e : events) json += e + (&e == &events[std::size(events) - 1] ? "" : ",");
  return json + "]}";
}

struct Want {
  int64_t kernel, idle, compute;
  double idle_pct, compute_pct, non_compute_pct, overlap_pct;
};

void check(const HtaFigures& f, const Want& w) {
  REQUIRE(f.valid);
  CHECK(f.kernel_time_us == w.kernel);
  CHECK(f.idle_time_us == w.idle);
  CHECK(f.compute_time_us == w.compute);
  CHECK(f.idle_pct == w.idle_pct);
  CHECK(f.compute_pct == w.compute_pct);
  CHECK(f.non_compute_pct == w.non_compute_pct);
  REQUIRE(f.comm_comp_overlap_pct.has_value());
  CHECK(*f.comm_comp_overlap_pct == w.overlap_pct);
}

std::vector<HtaRank> analyze_hand_made(bool include_last_step) {
  const std::string path = test::temp_path("hta_rules") + ".json";
  std::ofstream(path) << hand_made_trace();
  const TraceSet set = TraceSet::load({path});
  std::remove(path.c_str());
  HtaOptions opt;
  opt.include_last_step = include_last_step;
  return hta_analyze(set, opt);
}

}  // namespace

TEST_CASE("HTA's step filter, launch match, kinds and rounding equal HTA 0.5.0 on a hand-made trace", "[trace][hta]") {
  const std::vector<HtaRank> h = analyze_hand_made(false);
  REQUIRE(h.size() == 1);
  CHECK(h[0].step_filter);
  check(h[0].hta, {155, 93, 35, 60.0, 22.58, 17.42, 34.48});
  CHECK(h[0].hta.gpu_rows == 9);
  // memcomm's whole-trace variant: every kernel and memcpy, no sync spans.
  check(h[0].whole_trace, {156, 65, 58, 41.67, 37.18, 21.15, 48.15});
  CHECK(h[0].whole_trace.gpu_rows == 10);
}

TEST_CASE("HTA's include_last_profiler_step equals HTA 0.5.0 on a hand-made trace", "[trace][hta]") {
  const std::vector<HtaRank> h = analyze_hand_made(true);
  REQUIRE(h.size() == 1);
  check(h[0].hta, {156, 58, 65, 37.18, 41.67, 21.15, 48.15});
  CHECK(h[0].hta.gpu_rows == 11);
}

namespace {
// The whole-trace figures of a one-rank torch.profiler trace given as its JSON text.
HtaFigures whole_trace_of(const std::string& name, const std::string& json) {
  const std::string path = test::temp_path(name) + ".json";
  std::ofstream(path) << json;
  const TraceSet set = TraceSet::load({path});
  std::remove(path.c_str());
  const std::vector<HtaRank> h = hta_analyze(set, HtaOptions{});
  REQUIRE(h.size() == 1);
  return h[0].whole_trace;
}
}  // namespace

TEST_CASE("HTA's figures over a window under a microsecond are no shares, not -100% and 200%", "[trace][hta]") {
  // A sub-microsecond kernel (pytorch/kineto's docs/traces) ends before it starts once its times are
  // HTA's whole microseconds: a kernel time of -1 us, where HTA's own assertion fails.
  const HtaFigures f = whole_trace_of("hta_tiny",
                                      R"({"schemaVersion":1,"traceEvents":[{"ph":"X","cat":"kernel","name":"Kernel","pid":0,"tid":1,)"
                                      R"("ts":88437691101.749,"dur":0.02,"args":{"stream":1,"device":0,"correlation":1}}]})");
  REQUIRE(f.valid);
  CHECK(f.kernel_time_us <= 0);
  CHECK(std::isnan(f.idle_pct));
  CHECK(std::isnan(f.compute_pct));
  CHECK(std::isnan(f.non_compute_pct));
}

TEST_CASE("HTA's non-compute share is none, not negative, where cut rows leave more idle than compute leaves",
          "[trace][hta]") {
  // A memset under a microsecond, [21, 20] in HTA's whole microseconds, counts -1 us in the union:
  // idle 16 of 25 us beside 10 us of compute, so non-compute would be -1 us (HTA asserts >= 0).
  const HtaFigures f = whole_trace_of(
      "hta_negative",
      R"({"schemaVersion":1,"traceEvents":[)"
      R"({"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":1,"ts":10,"dur":5,"args":{"stream":1,"device":0}},)"
      R"j({"ph":"X","cat":"gpu_memset","name":"Memset (Device)","pid":0,"tid":1,"ts":20.3,"dur":0.2,"args":{"stream":1,"device":0}},)j"
      R"({"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":1,"ts":30,"dur":5,"args":{"stream":1,"device":0}}]})");
  REQUIRE(f.valid);
  CHECK(f.kernel_time_us == 25);
  CHECK(f.non_compute_time_us == -1);
  CHECK(f.compute_pct == 40.0);
  CHECK(f.idle_pct == 64.0);
  CHECK(std::isnan(f.non_compute_pct));
}

TEST_CASE("HTA's kernel kinds are read from names of any length", "[trace][hta]") {
  // std::regex's ".*" recursed once per character: a 30,000-character name overflowed the stack.
  const std::string long_name(200'000, 'k');
  const HtaFigures f = whole_trace_of(
      "hta_long_names",
      R"({"schemaVersion":1,"traceEvents":[)"
      R"({"ph":"X","cat":"kernel","name":")" + long_name + R"(","pid":0,"tid":1,"ts":10,"dur":10,"args":{"stream":1,"device":0}},)"
      R"({"ph":"X","cat":"kernel","name":"nccl)" + long_name + R"(Kernel","pid":0,"tid":1,"ts":30,"dur":10,"args":{"stream":2,"device":0}},)"
      R"({"ph":"X","cat":"kernel","name":")" + long_name + R"(Memcpy","pid":0,"tid":1,"ts":50,"dur":10,"args":{"stream":1,"device":0}}]})");
  REQUIRE(f.valid);
  CHECK(f.kernel_time_us == 50);
  CHECK(f.compute_time_us == 10);  // the plain kernel; the NCCL one and the copy are not compute
}

TEST_CASE("report --hta's table says why a cell is a dash", "[trace][hta]") {
  // A CPU-only rank has no GPU row (HTA raises on it) and no communication kernel: the table showed
  // dashes, and a footnote of nothing filtered, without a reason.
  const std::string path = test::temp_path("hta_dashes") + ".json";
  std::ofstream(path) << R"({"schemaVersion":1,"traceEvents":[)"
                         R"({"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":10,"dur":5,"args":{}}]})";
  const TraceSet set = TraceSet::load({path});
  std::remove(path.c_str());
  const std::string text = hta_to_text(hta_analyze(set, HtaOptions{}), HtaOptions{});
  CHECK(text.find("(-: no GPU rows to count (kernels, copies, sets, syncs on a stream); HTA's breakdown raises") !=
        std::string::npos);
  CHECK(text.find("(overlap% -: no communication kernel time to overlap)") != std::string::npos);
  // A rank with both has no such line.
  const std::string both = hta_to_text(analyze_hand_made(false), HtaOptions{});
  CHECK(both.find("no GPU rows") == std::string::npos);
}
