// Analysis on hand-built traces with known breakdown, overlap, busbw, skew and memory peaks.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

#include "memcomm/trace/analysis.hpp"
#include "memcomm/trace/event_sort.hpp"
#include "memcomm/trace/allocator_fold.hpp"
#include "memcomm/trace/virtual_reservations.hpp"
#include "memcomm_test.hpp"
#include "synthetic_run.hpp"
#include "trace_fixtures.hpp"

using namespace memcomm::prof;
using memcomm::prof::test::kMs;

namespace {
TraceSet load_synthetic() {
  const auto paths = test::write_synthetic_run(test::temp_path("analysis"));
  TraceSet set = TraceSet::load(paths);
  for (const auto& p : paths) std::remove(p.c_str());
  return set;
}
}  // namespace

TEST_CASE("interval arithmetic", "[profiler][analysis]") {
  std::vector<Interval> a = {{5, 10}, {0, 3}, {2, 4}, {12, 12}};
  merge_intervals(a);
  REQUIRE(a.size() == 2);
  CHECK(a[0].begin == 0);
  CHECK(a[0].end == 4);
  CHECK(union_length(a) == 9);
  std::vector<Interval> b = {{3, 6}, {9, 20}};
  CHECK(intersection_length(a, b) == 1 + 1 + 1);
  const auto d = subtract(a, b);
  CHECK(union_length(d) == 3 + 3);
  CHECK(clip(a, 1, 6).size() == 2);
  CHECK(union_length(clip(a, 1, 6)) == 3 + 1);
}

// The trainer's communication time is this union over the buckets' in-flight intervals (Note
// [Communication time] in trainer/src/grad_sync.cpp).
TEST_CASE("the union of intervals in any order, nested, empty or queued", "[profiler][analysis]") {
  CHECK(union_length({}) == 0);
  CHECK(union_length({{10, 20}}) == 10);
  CHECK(union_length({{10, 20}, {30, 35}}) == 15);            // apart
  CHECK(union_length({{10, 20}, {15, 30}}) == 20);            // overlapping
  CHECK(union_length({{10, 40}, {15, 20}, {25, 30}}) == 30);  // nested
  CHECK(union_length({{30, 35}, {10, 20}}) == 15);            // any order
  CHECK(union_length({{10, 10}, {20, 15}}) == 0);             // empty and reversed count nothing
  // Buckets launched together and served one after another by the engine: the later ones' (end -
  // start) include their wait in the queue, which a plain sum would count again.
  CHECK(union_length({{0, 10}, {0, 20}, {0, 30}}) == 30);
}

TEST_CASE("CPU run: breakdown, overlap, exposed communication and step table", "[profiler][analysis]") {
  const TraceSet set = load_synthetic();
  const Analysis a = analyze(set);
  REQUIRE(a.ranks.size() == 2);
  const RankSummary& r0 = a.ranks[0];
  CHECK_FALSE(r0.gpu_mode);
  // Window = step [0, 10 ms]; compute = [0.5, 9]; comm = [5, 9.5].
  const Breakdown& b0 = r0.breakdown;
  CHECK(b0.window_ns == 10 * kMs);
  CHECK(b0.compute_ns == 8 * kMs + kMs / 2);
  CHECK(b0.comm_total_ns == 4 * kMs + kMs / 2);
  CHECK(b0.overlap_ns == 4 * kMs);
  CHECK(b0.comm_ns == kMs / 2);
  CHECK(b0.exposed_comm_ns == kMs / 2);
  CHECK(b0.idle_ns == kMs);
  CHECK(b0.compute_ns + b0.comm_ns + b0.memcpy_ns + b0.idle_ns == b0.window_ns);
  CHECK(b0.overlap_pct == Approx(100.0 * 4.0 / 4.5));
  const Breakdown& b1 = a.ranks[1].breakdown;
  CHECK(b1.comm_total_ns == 3 * kMs + kMs / 2);
  CHECK(b1.overlap_pct == Approx(100.0 * 3.0 / 3.5));
  CHECK(a.mean_overlap_pct == Approx((100.0 * 4.0 / 4.5 + 100.0 * 3.0 / 3.5) / 2));

  REQUIRE(a.steps.size() == 2);
  const StepRow& s0 = a.steps[0];
  CHECK(s0.rank == 0);
  CHECK(s0.end - s0.begin == 10 * kMs);
  CHECK(s0.data_wait_ns == kMs / 2);
  CHECK(s0.breakdown.exposed_comm_ns == kMs / 2);
  CHECK(s0.peak_allocated == 3000);
  CHECK(s0.peak_reserved == 4096);
  CHECK(a.steps[1].peak_allocated == 0);
}

TEST_CASE("CPU run that marks no phase: its host ranges are the compute", "[profiler][analysis]") {
  // See Note [Breakdown definitions]: a torch.profiler trace of a CPU script without ProfilerStep read
  // a window of 0 and 0% of everything.
  const std::string path = test::temp_path("cpu_ops") + ".json";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(R"({"traceEvents": [
      {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1712195495401000, "dur": 300},
      {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 1712195495401500, "dur": 500}]})", f);
    std::fclose(f);
  }
  const TraceSet set = TraceSet::load({path});
  std::remove(path.c_str());
  const Analysis a = analyze(set);
  REQUIRE(a.ranks.size() == 1);
  const Breakdown& b = a.ranks[0].breakdown;
  CHECK(b.window_ns == 1000'000);
  CHECK(b.compute_ns == 800'000);
  CHECK(b.idle_ns == 200'000);
}

TEST_CASE("collectives are matched across ranks with nccl-tests bandwidth, skew and straggler", "[profiler][analysis]") {
  const TraceSet set = load_synthetic();
  // Clock offset applied: rank 1's events land on rank 0's timeline.
  CHECK(set.ranks[1].clock_offset_ns == 1000);
  const Analysis a = analyze(set);
  REQUIRE(a.collectives.size() == 1);
  const CollectiveStats& c = a.collectives[0];
  CHECK(c.ranks_seen == 2);
  CHECK(c.nranks == 2);
  CHECK(c.op == CollOp::AllReduce);
  CHECK(c.bytes == 100'000'000);
  CHECK(c.skew_ns == kMs);
  CHECK(c.straggler_rank == 1);
  CHECK(c.time_ns == 3 * kMs + kMs / 2);  // last start (6 ms) to last end (9.5 ms)
  const double algbw = 100e6 / 3.5e6;       // GB/s
  CHECK(c.algbw_gbps == Approx(algbw));
  CHECK(c.busbw_gbps == Approx(algbw * 2.0 * (2 - 1) / 2));
  CHECK(a.max_skew_ns == kMs);
}

TEST_CASE("busbw factors follow nccl-tests", "[profiler][analysis]") {
  CHECK(busbw_factor(CollOp::AllReduce, 8) == Approx(2.0 * 7 / 8));
  CHECK(busbw_factor(CollOp::AllGather, 4) == Approx(3.0 / 4));
  CHECK(busbw_factor(CollOp::ReduceScatter, 4) == Approx(3.0 / 4));
  CHECK(busbw_factor(CollOp::Broadcast, 4) == Approx(1.0));
  CHECK(busbw_factor(CollOp::AllReduce, 1) == Approx(0.0));
}

TEST_CASE("memory peaks and fragmentation over time", "[profiler][analysis]") {
  const TraceSet set = load_synthetic();
  const Analysis a = analyze(set);
  CHECK(a.ranks[0].peak_allocated == 3000);
  CHECK(a.ranks[0].peak_reserved == 4096);
  const auto& mem = a.memory[0];
  REQUIRE_FALSE(mem.empty());
  CHECK(mem.back().allocated == 2000);
  CHECK(mem.back().active == 2000);
  CHECK(mem.back().fragmentation == Approx(double(4096 - 2000) / 4096));
  // With sampled largest-free, fragmentation = 1 - largest_free / (reserved - allocated).
  RankTrace r;
  r.events = {Event::from(make_mem_sample(1, MemMetric::Allocated, 600)),
              Event::from(make_mem_sample(1, MemMetric::Reserved, 1000)),
              Event::from(make_mem_sample(1, MemMetric::LargestFree, 100))};
  const auto pts = memory_series(r);
  REQUIRE(pts.size() == 1);
  CHECK(pts[0].fragmentation == Approx(1.0 - 100.0 / 400.0));
}

TEST_CASE("an expandable segment counts its mapped bytes as reserved, not its virtual range", "[profiler][analysis]") {
  constexpr uint64_t kGiB = 1ULL << 30;
  const uint64_t base = 0x7f0000000000ULL;
  auto blk = [](EventKind k, int64_t ts, uint64_t a, uint64_t n) { return Event::from(make_mem_block(k, ts, a, n)); };
  RankTrace r;
  r.events = {blk(EventKind::SegmentAlloc, 1, base, 128 * kGiB),  // the virtual reservation
              blk(EventKind::SegmentMap, 2, base, kGiB),
              blk(EventKind::Alloc, 3, base, kGiB / 2),
              blk(EventKind::SegmentAlloc, 4, 0x1000, 2 << 20),    // a plain segment beside it
              blk(EventKind::SegmentMap, 5, base + kGiB, kGiB),
              blk(EventKind::SegmentUnmap, 6, base + kGiB, kGiB),
              blk(EventKind::SegmentFree, 7, 0x1000, 2 << 20),
              blk(EventKind::SegmentFree, 8, base, 128 * kGiB)};
  const auto pts = memory_series(r);
  REQUIRE(pts.size() == 8);
  uint64_t peak = 0;
  for (const auto& p : pts) peak = std::max(peak, p.reserved);
  CHECK(peak == 2 * kGiB + (2 << 20));
  CHECK(pts[2].reserved == kGiB);
  CHECK(pts[6].reserved == kGiB);
}

namespace {
Event blk(EventKind k, int64_t ts, uint64_t a, uint64_t n, uint8_t device = 0) { return Event::from(make_mem_block(k, ts, a, n, device)); }
Event smp(int64_t ts, MemMetric m, uint64_t v, uint8_t device = 0) { return Event::from(make_mem_sample(ts, m, v, device)); }
uint64_t peak_allocated(const std::vector<MemoryPoint>& pts) {
  uint64_t peak = 0;
  for (const auto& p : pts) peak = std::max(peak, p.allocated);
  return peak;
}
}  // namespace

// Note [Memory curves from block events] (allocator_fold.hpp): the fold replaces the samples only when
// it is provably the whole story.
TEST_CASE("memory series: a complete fold replaces samples that missed a peak", "[profiler][analysis]") {
  RankTrace r;
  r.events = {smp(0, MemMetric::Allocated, 512), smp(0, MemMetric::Reserved, 4096), blk(EventKind::SegmentAlloc, 1, 0x1000, 4096),
              blk(EventKind::Alloc, 2, 0x1000, 512),     blk(EventKind::Alloc, 3, 0x1400, 2000),
              blk(EventKind::FreeRequested, 4, 0x1400, 0),  // the size the block was allocated with counts
              blk(EventKind::FreeCompleted, 5, 0x1400, 0), smp(10, MemMetric::Allocated, 512)};
  const auto pts = memory_series(r);
  CHECK(peak_allocated(pts) == 2512);
  CHECK(pts.back().allocated == 512);
  CHECK(pts.back().reserved == 4096);
}

TEST_CASE("memory series: a trace that starts mid-run keeps the samples' level", "[profiler][analysis]") {
  // Its first events free a 60000 B block it never saw: the fold would say 1000 at its peak.
  RankTrace r;
  r.events = {smp(0, MemMetric::Allocated, 68000),   smp(0, MemMetric::Active, 68000),
              smp(0, MemMetric::Reserved, 70000),    blk(EventKind::FreeRequested, 1, 0x900000, 60000),
              blk(EventKind::FreeCompleted, 2, 0x900000, 60000), blk(EventKind::Alloc, 3, 0x1000, 1000),
              blk(EventKind::SegmentFree, 4, 0x800000, 4096),  smp(10, MemMetric::Allocated, 9000)};
  const auto pts = memory_series(r);
  CHECK(peak_allocated(pts) == 68000);
  CHECK(pts.back().allocated == 9000);
  for (const auto& p : pts) CHECK(p.reserved == 70000);
}

TEST_CASE("memory series: dropped events fall back to the samples", "[profiler][analysis]") {
  RankTrace r;
  r.events = {smp(0, MemMetric::Allocated, 100), smp(0, MemMetric::Reserved, 4096), blk(EventKind::SegmentAlloc, 1, 0x1000, 4096),
              blk(EventKind::Alloc, 2, 0x1000, 3000)};
  r.drops = 1;  // a DropEvent: some alloc or free is missing
  auto pts = memory_series(r);
  CHECK(peak_allocated(pts) == 100);
  r.drops = 0;
  pts = memory_series(r);
  CHECK(peak_allocated(pts) == 3000);
}

TEST_CASE("memory series: an allocation on an address still held means a lost free", "[profiler][analysis]") {
  RankTrace r;
  r.events = {smp(0, MemMetric::Allocated, 100), blk(EventKind::SegmentAlloc, 1, 0x1000, 1 << 20),
              blk(EventKind::Alloc, 2, 0x1000, 3000), blk(EventKind::Alloc, 3, 0x1000, 3000)};
  CHECK(peak_allocated(memory_series(r)) == 100);
}

TEST_CASE("memory series: the curves fold the samples' device only", "[profiler][analysis]") {
  RankTrace r;
  r.events = {smp(0, MemMetric::Allocated, 0, 0),      smp(0, MemMetric::Reserved, 0, 0),
              blk(EventKind::SegmentAlloc, 1, 0x1000, 4096, 0), blk(EventKind::SegmentAlloc, 2, 0x7000000, 1 << 20, kHostDevice),
              blk(EventKind::Alloc, 3, 0x1000, 1000, 0), blk(EventKind::Alloc, 4, 0x7000000, 5000, kHostDevice),
              smp(5, MemMetric::Allocated, 777, kHostDevice)};  // another device's sample: not D's curve
  const auto pts = memory_series(r);
  CHECK(peak_allocated(pts) == 1000);
  CHECK(pts.back().reserved == 4096);
  CHECK(pts.back().allocated == 1000);
}

TEST_CASE("memory series: sizes near 2^48 do not overflow the sums", "[profiler][analysis]") {
  RankTrace r;
  const uint64_t big = (uint64_t(1) << 48) - 1;
  for (int i = 0; i < 300; ++i) r.events.push_back(blk(EventKind::Alloc, i, 0x1000 + uint64_t(i) * 16, big));
  const auto pts = memory_series(r);
  CHECK(pts.back().allocated == uint64_t(300) * big);
}

TEST_CASE("GPU run: kernels are compute, NCCL kernels communication, memcpy counted apart", "[profiler][analysis]") {
  RankTrace r;
  r.rank = 0;
  r.world_size = 1;
  auto k = [](int64_t b, int64_t e, uint8_t sub) { return Event::from(make_compute(EventKind::Kernel, b, e, 0, 0, 0, 0, sub)); };
  r.events = {k(0, 100, 0), Event::from(make_compute(EventKind::Memcpy, 100, 150, 1, 64, 0, 0, 1)), k(150, 300, 0),
              k(200, 400, 1), k(500, 600, 0)};
  const auto ranges = pair_ranges(r);
  const auto spans = spans_of(r, ranges, collectives_of(r));
  CHECK(spans.gpu_mode);
  const Breakdown b = breakdown_over(spans, 0, 600);
  CHECK(b.compute_ns == 100 + 150 + 100);
  CHECK(b.comm_total_ns == 200);
  CHECK(b.overlap_ns == 100);
  CHECK(b.comm_ns == 100);
  CHECK(b.memcpy_ns == 50);
  CHECK(b.idle_ns == 100);
  CHECK(b.overlap_pct == Approx(50.0));
}

TEST_CASE("a run whose copies were recorded and kernels not is a GPU run, and kernel launches with no kernel are counted",
          "[profiler][analysis]") {
  RankTrace r;
  r.rank = 0;
  r.strings = {"", "cudaLaunchKernel", "aten::mm", "cudaMemcpyAsync", "cudaGetDevice"};
  const auto host = [](EventKind k, int64_t b, int64_t e, StringId name) { return Event::from(make_host_span(k, b, e, 0, name)); };
  r.events = {host(EventKind::Launch, 0, 10, 1), host(EventKind::Launch, 20, 30, 3), host(EventKind::Launch, 30, 35, 4)};
  r.events.push_back(Event::from(make_range(EventKind::RangeBegin, 0, Phase::Custom, 2, 0, 0)));
  r.events.push_back(Event::from(make_range(EventKind::RangeEnd, 50, Phase::Custom, 2, 0, 0)));
  // The host's operator is all there is: a CPU run, and its kernel launch says kernels went unrecorded.
  CHECK_FALSE(spans_of(r, pair_ranges(r), collectives_of(r)).gpu_mode);
  CHECK(kernel_launches_without_kernels(r) == 1);
  // A copy that ran: the device's timeline, idle but for it (not the host's operator as compute).
  r.events.push_back(Event::from(make_compute(EventKind::Memcpy, 40, 60, 1, 64, 0, 0, 1)));
  const auto spans = spans_of(r, pair_ranges(r), collectives_of(r));
  CHECK(spans.gpu_mode);
  const Breakdown b = breakdown_over(spans, 0, 100);
  CHECK(b.compute_ns == 0);
  CHECK(b.memcpy_ns == 20);
  CHECK(kernel_launches_without_kernels(r) == 1);  // still no kernel: a device idle but for its copy
  r.events.push_back(Event::from(make_compute(EventKind::Kernel, 70, 80, 1, 0, 0, 0, 0)));
  CHECK(kernel_launches_without_kernels(r) == 0);
}

TEST_CASE("report renders text and JSON", "[profiler][analysis]") {
  const Analysis a = analyze(load_synthetic());
  const std::string text = analysis_to_text(a);
  CHECK(text.find("all_reduce") != std::string::npos);
  CHECK(text.find("overlap") != std::string::npos);
  const std::string json = analysis_to_json(a);
  CHECK(json.find("\"busbw_gbps\"") != std::string::npos);
  CHECK(text.find(" GB/s, max skew") != std::string::npos);  // sized collectives: a bus bandwidth
  const auto n = a.collectives.size();
  REQUIRE(n > 0);
  CHECK(text.find(fmt::format("Collectives ({}, {} matched across ranks)", n, n)) != std::string::npos);
  // A rank whose trace records no memory has unknown peaks, not 0 MiB ones.
  CHECK(nlohmann::json::parse(analysis_to_json(a))["ranks"][0]["memory_recorded"] == a.ranks[0].memory_recorded);
  Analysis unrecorded = a;
  for (auto& r : unrecorded.ranks) r.memory_recorded = false, r.peak_allocated = r.peak_reserved = 0;
  for (auto& s : unrecorded.steps) s.peak_allocated = s.peak_reserved = 0;
  const std::string blank = analysis_to_text(unrecorded);
  CHECK(blank.find("         -         -") != std::string::npos);  // peak_MiB, resv_MiB
  CHECK(blank.find(" 0.0\n") == std::string::npos);               // no step row's peak reads 0.0
  Analysis alone = a;  // each seen by one rank: none matched (it read "N matched")
  for (auto& c : alone.collectives) c.ranks_seen = 1;
  CHECK(analysis_to_text(alone).find(fmt::format("Collectives ({}, 0 matched across ranks)", n)) != std::string::npos);
  Analysis sizeless = a;  // a trace whose collectives record no message size (DLRM's all-to-all)
  for (auto& c : sizeless.collectives) c.bytes = 0;
  sizeless.busbw_known = false;
  CHECK(analysis_to_text(sizeless).find("bus bandwidth unknown") != std::string::npos);
  // In JSON too: null, which a reader cannot take for 0 GB/s.
  const auto j = nlohmann::json::parse(analysis_to_json(sizeless));
  CHECK(j["summary"]["mean_busbw_gbps"].is_null());
  for (const auto& c : j["collectives"]) CHECK((c["busbw_gbps"].is_null() && c["algbw_gbps"].is_null()));
  CHECK(nlohmann::json::parse(json)["summary"]["mean_busbw_gbps"].get<double>() > 0);
}

TEST_CASE("time sorting is stable for nearly sorted and for shuffled input", "[profiler][analysis]") {
  std::vector<Event> v;
  for (int i = 0; i < 5000; ++i) v.push_back(Event::from(make_counter((i % 7 == 0) ? i - 5 : i, 0, i)));
  v.push_back(Event::from(make_counter(100, 0, -1)));  // same ts as an earlier event: must stay after it
  sort_by_time(v);
  for (size_t i = 1; i < v.size(); ++i) REQUIRE(v[i - 1].ts <= v[i].ts);
  size_t pos_first = 0, pos_dup = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].ts == 100 && v[i].as<CounterEvent>().value == 100) pos_first = i;
    if (v[i].as<CounterEvent>().value == -1) pos_dup = i;
  }
  CHECK(pos_first < pos_dup);
  // Far out of order: falls back to a stable sort.
  std::vector<Event> w;
  for (int i = 0; i < 20000; ++i) w.push_back(Event::from(make_counter((i * 7919) % 20000, 0, i)));
  sort_by_time(w);
  for (size_t i = 1; i < w.size(); ++i) REQUIRE(w[i - 1].ts <= w[i].ts);
  // Runs merged.
  std::vector<Event> r;
  for (int run = 0; run < 5; ++run)
    for (int i = 0; i < 100; ++i) r.push_back(Event::from(make_counter(i * 5 + run, 0, run)));
  merge_sorted_runs(r, {0, 100, 200, 300, 400, 500});
  for (size_t i = 1; i < r.size(); ++i) REQUIRE(r[i - 1].ts <= r[i].ts);
}

TEST_CASE("memory fold: reused and fresh addresses, with the dead entries swept, keep exact levels", "[profiler][analysis]") {
  // See Note [Dead blocks stay in the map]: freed entries are reused by the next Alloc at their address
  // and swept once they outnumber the live ones; neither may change what the fold says.
  AllocatorFold f;
  constexpr FoldCheck ok = FoldCheck::Ok;
  CHECK(f.apply(EventKind::SegmentAlloc, 0, uint64_t(1) << 40) == ok);  // one segment holds every block
  for (uint64_t i = 0; i < 3; ++i) CHECK(f.apply(EventKind::Alloc, 0x1000 + i * 0x100, 64) == ok);  // held throughout
  for (uint64_t round = 0; round < 50'000; ++round) {
    const uint64_t addr = round % 2 == 0 ? 0x9000 : 0x100000 + round * 0x100;  // reused, then fresh ones
    REQUIRE(f.apply(EventKind::Alloc, addr, 32) == ok);
    REQUIRE(f.apply(EventKind::FreeRequested, addr, 0) == ok);
    CHECK(f.active() == 3 * 64 + 32);
    REQUIRE(f.apply(EventKind::FreeCompleted, addr, 0) == ok);
  }
  CHECK(f.allocated() == 3 * 64);
  CHECK(f.active() == 3 * 64);
  CHECK_FALSE(f.broken());
  CHECK(f.apply(EventKind::Oom, 0x9000, 1 << 20) == ok);  // not a block event: the levels stay
  CHECK(f.allocated() == 3 * 64);
  CHECK(f.reserved() == uint64_t(1) << 40);
  CHECK(f.apply(EventKind::FreeCompleted, 0x9000, 0) == FoldCheck::Ended);  // a dead entry is not a live block
  CHECK(f.broken());
}

TEST_CASE("virtual reservations: the producer's flag, or a map landing in the segment, makes one", "[profiler][analysis]") {
  // The one rule of memcomm-trace report and memcomm-replay (Note [Virtual reservations]).
  VirtualReservations g;
  const size_t plain = g.add(EventKind::SegmentAlloc, 0x1000, 0x1000, false);
  const size_t guessed = g.add(EventKind::SegmentAlloc, 0x100000, 1 << 30, false);
  const size_t flagged = g.add(EventKind::SegmentAlloc, 0x80000000, 1 << 30, true);  // never mapped
  CHECK(g.add(EventKind::SegmentMap, 0x100000 + 4096, 4096, false) == VirtualReservations::kNoIndex);
  CHECK(g.add(EventKind::SegmentUnmap, 0x100000 + 4096, 4096, false) == VirtualReservations::kNoIndex);
  const size_t guessed_free = g.add(EventKind::SegmentFree, 0x100000, 1 << 30, false);
  const size_t plain_free = g.add(EventKind::SegmentFree, 0x1000, 0x1000, false);
  const size_t pre_trace_free = g.add(EventKind::SegmentFree, 0x5000000, 1 << 20, true);  // allocated before the trace
  const size_t late = g.add(EventKind::SegmentAlloc, 0x100000, 0x1000, false);  // the address again, a plain segment
  CHECK(g.add(EventKind::SegmentMap, 0x200000, 4096, false) == VirtualReservations::kNoIndex);  // in no live segment
  CHECK_FALSE(g.is_virtual(plain));
  CHECK_FALSE(g.is_virtual(plain_free));
  CHECK(g.is_virtual(guessed));
  CHECK(g.is_virtual(guessed_free));  // its release is what the segment turned out to be
  CHECK(g.is_virtual(flagged));
  CHECK(g.is_virtual(pre_trace_free));
  CHECK_FALSE(g.is_virtual(late));
}
