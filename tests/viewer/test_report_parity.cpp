// The viewer's step table and summary hold the figures memcomm-trace report computes (Note [One
// analysis engine] in memcomm/trace/analysis.hpp): a two-rank run written here (parity_run.hpp)
// is loaded as memcomm-view loads it (BackgroundLoad, build_indexes) and analysed with
// prof::analyze, and every figure the viewer shows is compared: step numbers and times, comm,
// exposed comm, overlap, data wait, per-step and per-rank peaks, each matched collective's time,
// algbw, busbw, skew and straggler, the mean busbw and the maximum skew.
#include "memcomm_test.hpp"
#include "parity_run.hpp"

#include <memcomm/trace/analysis.hpp>
#include <memcomm/trace/trace_set.hpp>
#include <memcomm/trace/trace_writer.hpp>
#include <memcomm/view/builder.hpp>
#include <memcomm/view/indexes.hpp>
#include <memcomm/view/loader.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <map>
#include <string>
#include <vector>

using namespace memcomm::view;
namespace prof = memcomm::prof;

namespace {

std::string out_stem(const std::string& name) {
  const std::string d = std::string(MEMCOMM_BINARY_DIR) + "/tests/viewer_out";
  std::filesystem::create_directories(d);
  return d + "/" + name;
}

void check_steps(const std::vector<StepRow>& shown, const prof::Analysis& a) {
  REQUIRE(shown.size() == a.steps.size());
  for (std::size_t k = 0; k < shown.size(); ++k) {
    const StepRow& v = shown[k];
    const prof::StepRow& p = a.steps[k];
    INFO("step row " << k << ": rank " << p.rank << " step " << p.step);
    CHECK(v.rank == p.rank);
    CHECK(v.step == p.step);
    CHECK(v.start == p.begin);
    CHECK(v.end == p.end);
    CHECK(v.data_wait == p.data_wait_ns);
    CHECK(v.comm == p.breakdown.comm_total_ns);
    CHECK(v.exposed_comm == p.breakdown.exposed_comm_ns);
    CHECK(v.overlap_pct == Approx(p.breakdown.overlap_pct).margin(1e-9));
    CHECK(v.peak_allocated == static_cast<double>(p.peak_allocated));
  }
}

void check_collectives(const Timeline& tl, const prof::Analysis& a) {
  std::map<std::pair<std::uint64_t, std::uint64_t>, const prof::CollectiveStats*> by_key;
  for (const auto& c : a.collectives) by_key[{c.comm_key, c.seq}] = &c;
  std::size_t groups = 0;
  for (const auto& rd : tl.ranks)
    for (const Collective& c : rd.collectives) {
      INFO("rank " << rd.rank << " comm " << c.comm_key << " seq " << c.seq);
      REQUIRE(by_key.count({c.comm_key, c.seq}) == 1);
      const prof::CollectiveStats& p = *by_key[{c.comm_key, c.seq}];
      groups += c.first_in_group;
      CHECK(c.group_size == static_cast<std::uint32_t>(p.nranks));
      CHECK(c.time == p.time_ns);
      CHECK(c.skew == p.skew_ns);
      CHECK(c.algbw == Approx(p.algbw_gbps));
      CHECK(c.busbw == Approx(p.busbw_gbps));
      CHECK(c.straggler == (rd.rank == p.straggler_rank));
    }
  CHECK(groups == a.collectives.size());
}

void check_summary(const Timeline& tl, const Summary& s, const prof::Analysis& a) {
  CHECK(s.mean_busbw == Approx(a.mean_busbw_gbps));
  CHECK(s.max_skew == a.max_skew_ns);
  std::uint64_t peak_allocated = 0, peak_reserved = 0;
  for (const auto& r : a.ranks) {
    peak_allocated = std::max(peak_allocated, r.peak_allocated);
    peak_reserved = std::max(peak_reserved, r.peak_reserved);
    const RankData* rd = nullptr;
    for (const auto& x : tl.ranks) rd = x.rank == r.rank ? &x : rd;
    REQUIRE(rd != nullptr);
    const CounterSeries* allocated = rd->counter("allocated");
    CHECK((allocated ? allocated->global_max() : 0.0) == static_cast<double>(r.peak_allocated));  // none: no memory
  }
  CHECK(s.peak_allocated == static_cast<double>(peak_allocated));
  CHECK(s.peak_reserved == static_cast<double>(peak_reserved));
  std::map<int, std::uint64_t> stragglers;
  for (const auto& c : a.collectives)
    if (c.straggler_rank != memcomm::prof::kUnknownRank && !c.ranks_disagree) ++stragglers[int(c.straggler_rank)];
  CHECK(s.stragglers == stragglers);
  // The Summary counted each rank's record (54 for a two-rank run whose report lists 27).
  CHECK(s.collectives == a.collectives.size());
  CHECK(s.disagreeing == static_cast<std::uint64_t>(std::count_if(a.collectives.begin(), a.collectives.end(),
                                                                  [](const auto& c) { return c.ranks_disagree; })));
}

}  // namespace

TEST_CASE("the viewer shows memcomm-trace report's figures for a loaded run", "[unit][viewer]") {
  const bool kernels = GENERATE(false, true);
  INFO((kernels ? "GPU" : "CPU") << " run");
  const auto files = parity_run::write(out_stem(kernels ? "parity_gpu" : "parity_cpu"), kernels);
  BackgroundLoad load(files);
  Timeline tl = load.take();
  REQUIRE(load.errors().empty());
  const TimelineIndexes ix = build_indexes(tl);
  const prof::Analysis a = prof::analyze(prof::TraceSet::load(files));

  // The run has what the comparison is meant to cover.
  REQUIRE(a.steps.size() == 16);
  CHECK(a.steps.front().step == 1);
  CHECK(a.ranks.at(0).gpu_mode == kernels);
  CHECK(a.mean_busbw_gbps > 0);
  CHECK(a.max_skew_ns > 0);
  CHECK(a.ranks.at(1).peak_allocated > a.ranks.at(0).peak_allocated);
  bool overlapped = false, exposed = false;
  for (const auto& s : a.steps) {
    overlapped = overlapped || s.breakdown.overlap_ns > 0;
    exposed = exposed || s.breakdown.exposed_comm_ns > 0;
  }
  CHECK((overlapped && exposed));
  // On a CPU run the comm phase inside an odd step's backward is no compute: 0.8 ms more of its
  // all-reduce is exposed than in the even step after it (see Note [The wait at backward's end]).
  std::map<std::uint64_t, std::int64_t> rank0_exposed;
  for (const auto& s : a.steps)
    if (s.rank == 0) rank0_exposed[s.step] = s.breakdown.exposed_comm_ns;
  for (std::uint64_t step = 1; !kernels && step < 7; step += 2)
    CHECK(rank0_exposed[step] - rank0_exposed[step + 1] == 800'000);

  check_steps(ix.steps, a);
  check_steps(step_table(tl), a);
  check_collectives(tl, a);
  check_summary(tl, ix.summary, a);
}

TEST_CASE("one rank of a run loaded alone has memcomm-trace report's bandwidth", "[unit][viewer]") {
  // A communicator whose size was not recorded (memcomm-train's default group) spans the world the
  // file's header names, not the one rank loaded: the viewer's busbw was 0 (a group of one) where
  // report's was the run's.
  std::vector<prof::Event> v;
  for (std::uint32_t seq = 0; seq < 2; ++seq) {
    const std::int64_t t = 10'000'000 * (seq + 1);
    v.push_back(prof::Event::from(prof::make_collective(prof::EventKind::CollStart, t, prof::CollOp::AllReduce,
                                                        prof::DType::F32, 16u << 20, 0, seq)));
    v.push_back(prof::Event::from(prof::make_collective(prof::EventKind::CollEnd, t + 1'000'000, prof::CollOp::AllReduce,
                                                        prof::DType::F32, 16u << 20, 0, seq)));
  }
  prof::WriterOptions o;
  o.rank = 0;
  o.world_size = 4;
  const std::vector<std::string> one{out_stem("one_rank.rank0.mct")};
  prof::TraceWriter w(one.front(), o);
  w.write_chunk({}, v);
  w.close();
  BackgroundLoad load(one);
  Timeline tl = load.take();
  REQUIRE(load.errors().empty());
  const prof::Analysis a = prof::analyze(prof::TraceSet::load(one));
  REQUIRE(a.mean_busbw_gbps > 0);
  check_summary(tl, build_indexes(tl).summary, a);
  check_collectives(tl, a);
}

TEST_CASE("collectives match across ranks by their communicator, whatever order each rank met its groups in",
          "[unit][viewer]") {
  // Rank 0 meets a tensor-parallel group as communicator 0 and the data-parallel group as 1; rank 1
  // meets them the other way round. Each issues seq 0 and 1 on both. Keyed by index, rank 0's TP
  // collectives were matched with rank 1's DP ones (a skew of 3 ms, a false straggler).
  constexpr std::uint64_t kTp = 0x7000000011ull, kDp = 0xD000000022ull;
  std::vector<std::string> files;
  for (std::uint32_t rank = 0; rank < 2; ++rank) {
    const std::uint8_t tp = rank == 0 ? 0 : 1, dp = rank == 0 ? 1 : 0;
    std::vector<prof::Event> v;
    v.push_back(prof::Event::from(prof::make_meta(0, prof::MetaKey::Rank, rank)));
    v.push_back(prof::Event::from(prof::make_meta(0, prof::MetaKey::WorldSize, 2)));
    v.push_back(prof::Event::from(prof::make_comm_info(0, tp, 2, static_cast<std::uint16_t>(rank), kTp)));
    v.push_back(prof::Event::from(prof::make_comm_info(0, dp, 2, static_cast<std::uint16_t>(rank), kDp)));
    const auto coll = [&](std::int64_t start, std::uint8_t comm, prof::CollOp op, std::uint64_t bytes, std::uint32_t seq) {
      v.push_back(prof::Event::from(prof::make_collective(prof::EventKind::CollStart, start, op, prof::DType::F32, bytes, comm, seq)));
      v.push_back(prof::Event::from(prof::make_collective(prof::EventKind::CollEnd, start + 1'000'000, op, prof::DType::F32, bytes, comm, seq)));
    };
    for (std::uint32_t seq = 0; seq < 2; ++seq) {
      const std::int64_t t = 10'000'000 * (seq + 1) + 100'000 * rank;
      coll(t, tp, prof::CollOp::AllGather, 4u << 20, seq);
      coll(t + 3'000'000, dp, prof::CollOp::AllReduce, 16u << 20, seq);
    }
    std::stable_sort(v.begin(), v.end(), [](const prof::Event& a, const prof::Event& b) { return a.ts < b.ts; });
    prof::WriterOptions o;
    o.rank = rank;
    o.world_size = 2;
    files.push_back(out_stem("comm_order.rank" + std::to_string(rank) + ".mct"));
    prof::TraceWriter w(files.back(), o);
    w.write_chunk({}, v);
    w.close();
  }
  BackgroundLoad load(files);
  const Timeline tl = load.take();
  REQUIRE(load.errors().empty());
  const prof::Analysis a = prof::analyze(prof::TraceSet::load(files));
  REQUIRE(a.collectives.size() == 4);
  for (const auto& rd : tl.ranks)
    for (const Collective& c : rd.collectives) {
      INFO("rank " << rd.rank << " comm " << c.comm << " seq " << c.seq);
      CHECK(c.comm_key == (tl.strings.get(c.op) == std::string("all_gather") ? kTp : kDp));
      CHECK(c.skew == 100'000);  // rank 1 a tenth of a millisecond after rank 0, in every group
      CHECK_FALSE(c.ranks_disagree);
    }
  check_collectives(tl, a);
}

TEST_CASE("steps are numbered by their recorded ids, else from 1", "[unit][viewer]") {
  // Recorded ids (the trainer's, from 1) are shown as they are: parity_run's steps are 1..8.
  const auto files = parity_run::write(out_stem("parity_ids"));
  BackgroundLoad load(files);
  const Timeline tl = load.take();
  const auto rows = step_table(tl);
  REQUIRE(rows.size() == 16);
  for (std::size_t k = 0; k < 8; ++k) CHECK(rows[k].step == k + 1);
  // A source without ids (builder phases, as Chrome JSON and synthetic runs give) counts from 1.
  TimelineBuilder b;
  b.phase(0, "step", 0, 10);
  b.phase(0, "step", 10, 20);
  const auto unnumbered = step_table(b.finish("no ids"));
  REQUIRE(unnumbered.size() == 2);
  CHECK(unnumbered[0].step == 1);
  CHECK(unnumbered[1].step == 2);
}

TEST_CASE("a step the trace ends during is no step, for the viewer and the report alike", "[unit][viewer]") {
  // See Note [A step the trace cut off]: a recording killed during its third step. The report counted
  // it (3 steps, the last ending at the file's last event); the viewer showed 2.
  const std::string path = out_stem("cut_step.rank0.mct");
  {
    std::vector<prof::Event> ev;
    const auto range = [&ev](prof::EventKind k, std::int64_t ts, std::uint64_t id) {
      ev.push_back(prof::Event::from(prof::make_range(k, ts, prof::Phase::Step, prof::kNoString, id, 0)));
    };
    for (std::uint64_t step = 1; step <= 3; ++step) {
      const std::int64_t begin = std::int64_t(step) * 10'000'000;
      range(prof::EventKind::RangeBegin, begin, step);
      ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeBegin, begin + 1'000'000, prof::Phase::Forward,
                                                      prof::kNoString, 0, 0)));
      ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeEnd, begin + 4'000'000, prof::Phase::Forward,
                                                      prof::kNoString, 0, 0)));
      if (step < 3) range(prof::EventKind::RangeEnd, begin + 9'000'000, step);
    }
    prof::WriterOptions o;
    o.rank = 0;
    o.world_size = 1;
    prof::TraceWriter w(path, o);
    w.write_chunk({}, ev);
    w.close();
  }
  BackgroundLoad load({path});
  const Timeline tl = load.take();
  REQUIRE(load.errors().empty());
  const prof::Analysis a = prof::analyze(prof::TraceSet::load({path}));
  REQUIRE(a.steps.size() == 2);
  CHECK(a.ranks.at(0).steps == 2);
  CHECK(a.ranks.at(0).unfinished_steps == 1);
  CHECK(a.ranks.at(0).mean_step_ns == 9'000'000);
  check_steps(step_table(tl), a);
  CHECK(prof::analysis_to_text(a).find("rank 0: 1 step the trace ends during (the recording stopped), not counted") !=
        std::string::npos);
}

TEST_CASE("a torch.profiler trace of a CPU script: the viewer's steps take its operators as compute, as the report does",
          "[unit][viewer]") {
  // See Note [Breakdown definitions]: a CPU run that marks no forward/backward phase computes in its
  // operators, less each thread's communication calls (gloo: and c10d:: operators); the Python
  // frames they ran under are no compute. The step's 200 us all_reduce on Gloo's thread meets the
  // c10d::allreduce_ call that issued it (no compute) and a 50 us add; the 100 us barrier blocks the
  // main thread, which computes nothing then.
  const auto rank_json = [](int rank, int shift_us) {
    return fmt::format(R"json({{"distributedInfo": {{"backend": "gloo", "rank": {0}, "world_size": 2}}, "traceEvents": [
      {{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": {1}, "dur": 1000}},
      {{"ph": "X", "cat": "python_function", "name": "train.py(9): <module>", "pid": 1, "tid": 1, "ts": {1}, "dur": 1000}},
      {{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": {2}, "dur": 300}},
      {{"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1, "ts": {3}, "dur": 10}},
      {{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 9, "ts": {4}, "dur": 200,
        "args": {{"Input type": ["float"], "Input Dims": [[256]]}}}},
      {{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": {5}, "dur": 50}},
      {{"ph": "X", "cat": "cpu_op", "name": "c10d::barrier", "pid": 1, "tid": 1, "ts": {6}, "dur": 100}},
      {{"ph": "X", "cat": "user_annotation", "name": "gloo:barrier", "pid": 1, "tid": 1, "ts": {6}, "dur": 100}}]}})json",
                       rank, shift_us, shift_us + 100, shift_us + 400, shift_us + 405, shift_us + 500, shift_us + 700);
  };
  const std::vector<std::string> files = {out_stem("gloo_cpu.rank0.json"), out_stem("gloo_cpu.rank1.json")};
  std::ofstream(files[0], std::ios::binary) << rank_json(0, 0);
  std::ofstream(files[1], std::ios::binary) << rank_json(1, 20);
  BackgroundLoad load(files);
  const Timeline tl = load.take();
  REQUIRE(load.errors().empty());
  const prof::Analysis a = prof::analyze(prof::TraceSet::load(files));
  REQUIRE(a.steps.size() == 2);
  const prof::Breakdown& b = a.steps[0].breakdown;
  CHECK(b.comm_total_ns == 300'000);
  CHECK(b.overlap_ns == 50'000);
  CHECK(b.exposed_comm_ns == 250'000);
  check_steps(step_table(tl), a);
}

TEST_CASE("small torch.profiler traces: the viewer's steps and summary hold the report's figures", "[unit][viewer]") {
  // Each a case where the two once differed (minimal traces from a parity run over ~70 trace sets).
  struct Case {
    const char* name;
    std::vector<std::string> ranks;
  };
  const auto step = R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100})";
  const auto gloo = [](int rank, int ts, int elements) {
    return fmt::format(R"({{"distributedInfo": {{"backend": "gloo", "rank": {}, "world_size": 2}}, "traceEvents": [{},
      {{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 1, "ts": {}, "dur": 10,
        "args": {{"Input type": ["float"], "Input Dims": [[{}]]}}}}]}})",
                       rank, R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100})",
                       ts, elements);
  };
  const auto memory = [](int total, int bytes) {
    return fmt::format(R"({{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 20, "s": "t",
      "args": {{"Total Reserved": 0, "Total Allocated": {}, "Bytes": {}, "Addr": 1000, "Device Id": -1, "Device Type": 0}}}})",
                       total, bytes);
  };
  const std::vector<Case> cases = {
      // See Note [Collectives the ranks disagree on]: 1000 against 2000 floats, out of the summary.
      {"disagree", {gloo(0, 10, 1000), gloo(1, 50, 2000)}},
      // torch.profiler numbers a lone step 0 (schedule(wait=0, warmup=0, active=1)).
      {"step0", {R"({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 100}]})"}},
      // A temporary allocated and freed within one microsecond is the step's peak.
      {"peak_in_one_us", {fmt::format(R"({{"traceEvents": [{}, {}, {}]}})", step, memory(100, 100), memory(0, -100))}},
      // A CUDA launch call on the host is no operator.
      {"launch", {fmt::format(R"({{"traceEvents": [{},
        {{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2, "ts": 10, "dur": 40,
          "args": {{"Input type": ["float"], "Input Dims": [[1000]]}}}},
        {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 10}}]}})", step)}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    std::vector<std::string> files;
    for (std::size_t r = 0; r < c.ranks.size(); ++r) {
      files.push_back(out_stem(fmt::format("small_{}.rank{}.json", c.name, r)));
      std::ofstream(files.back(), std::ios::binary) << c.ranks[r];
    }
    BackgroundLoad load(files);
    Timeline tl = load.take();
    REQUIRE(load.errors().empty());
    const TimelineIndexes ix = build_indexes(tl);
    const prof::Analysis a = prof::analyze(prof::TraceSet::load(files));
    check_steps(ix.steps, a);
    check_summary(tl, ix.summary, a);
    const std::string name = c.name;
    if (name == "disagree") CHECK((a.disagreeing_collectives == 1 && ix.summary.max_skew == 0 && ix.summary.mean_busbw == 0));
    if (name == "step0") CHECK(ix.steps.at(0).step == 0);
    if (name == "peak_in_one_us") CHECK(a.steps.at(0).peak_allocated == 100);
    if (name == "launch") CHECK(ix.steps.at(0).overlap_pct == 0);
  }
}
