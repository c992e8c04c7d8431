// TimelineBuilder: rows, collective matching (straggler, skew, busbw), derived memory curves,
// merging, and the analysis numbers on a hand-built trace with known answers.
#include "memcomm_test.hpp"

#include <memcomm/view/analysis.hpp>
#include <memcomm/view/builder.hpp>
#include <memcomm/view/synthetic.hpp>

#include <map>
#include <set>

using namespace memcomm::view;
using memcomm::prof::EventKind;

TEST_CASE("nested phases go to rows by depth and stay sorted", "[unit][viewer]") {
  TimelineBuilder b;
  b.phase(0, "step", 0, 100);
  b.phase(0, "forward", 10, 40);
  b.phase(0, "backward", 40, 90);
  b.nvtx(0, "inner", 12, 20);
  b.kernel(0, 7, "gemm", 0, 10);
  b.kernel(0, 7, "gemm", 5, 15);  // overlaps: spills into a second row
  Timeline tl = b.finish("test");
  REQUIRE(tl.ranks.size() == 1);
  const auto& lanes = tl.ranks[0].lanes;
  REQUIRE(lanes.size() == 3);
  CHECK(lanes[0].kind == LaneKind::Phase);
  REQUIRE(lanes[0].rows.size() == 2);
  CHECK(lanes[0].rows[0].size() == 1);
  CHECK(lanes[0].rows[1].size() == 2);
  CHECK(lanes[2].kind == LaneKind::Kernel);
  CHECK(lanes[2].rows.size() == 2);
  CHECK(tl.begin == 0);
  CHECK(tl.end == 100);
  CHECK(tl.event_count == 6);
}

TEST_CASE("the summary counts stragglers of every rank, 64 and up too", "[unit][viewer]") {
  // The sampled_pair traces come from a 128-rank job: a fixed table of 64 dropped its upper half.
  TimelineBuilder b;
  for (std::uint32_t r : {100u, 101u}) b.collective(r, "all_reduce", 1 << 20, 0, 7, r == 101 ? 900 : 100, 2000, 128);
  const Summary s = summarize(b.finish("test"));
  CHECK(s.stragglers == std::map<int, std::uint64_t>{{101, 1}});
}

TEST_CASE("collectives match across ranks with straggler and skew and busbw", "[unit][viewer]") {
  TimelineBuilder b;
  // all_reduce of 1 GB on 4 ranks; rank 2 arrives last; each takes 1 s on its rank.
  const TimeNs starts[4] = {1000, 1200, 5000, 1100};
  for (std::uint32_t r = 0; r < 4; ++r) b.collective(r, "all_reduce", 1'000'000'000, 0, 42, starts[r], starts[r] + 1'000'000'000, 4);
  Timeline tl = b.finish("test");
  REQUIRE(tl.ranks.size() == 4);
  for (std::uint32_t r = 0; r < 4; ++r) {
    const Collective& c = tl.ranks[r].collectives.at(0);
    CHECK(c.straggler == (r == 2));
    CHECK(c.skew == 4000);
    CHECK(c.group_size == 4);
    CHECK(c.algbw == Approx(1.0));
    CHECK(c.busbw == Approx(1.5));  // 2(n-1)/n = 1.5
    CHECK(c.next_rank == (r < 3 ? static_cast<int>(r + 1) : -1));
  }
  // Ops are known by the profiler's names, exactly (no guessing from parts of a name), and their
  // busbw factor is prof::busbw_factor's.
  memcomm::prof::CollOp op{};
  CHECK((memcomm::prof::coll_op_from_name("all_gather", op) && op == memcomm::prof::CollOp::AllGather));
  CHECK((memcomm::prof::coll_op_from_name("broadcast", op) && op == memcomm::prof::CollOp::Broadcast));
  CHECK_FALSE(memcomm::prof::coll_op_from_name("allgather", op));
  const Summary s = summarize(tl);
  CHECK(s.stragglers == std::map<int, std::uint64_t>{{2, 1}});
  CHECK(s.max_skew == 4000);
}

TEST_CASE("step table: comm and exposed comm and overlap on a known trace", "[unit][viewer]") {
  TimelineBuilder b;
  b.phase(0, "step", 0, 100);
  b.phase(0, "data_wait", 0, 10);
  b.kernel(0, 7, "gemm", 10, 50);
  b.collective(0, "all_reduce", 100, 0, 0, 40, 80);  // 40 ns comm, 10 overlapped by the kernel
  b.counter(0, "allocated", 0, 100);
  b.counter(0, "allocated", 60, 700);
  b.counter(0, "allocated", 90, 300);
  b.phase(0, "step", 100, 200);
  Timeline tl = b.finish("test");
  const auto rows = step_table(tl);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].comm == 40);
  CHECK(rows[0].exposed_comm == 30);
  CHECK(rows[0].overlap_pct == Approx(25.0));
  CHECK(rows[0].data_wait == 10);
  CHECK(rows[0].peak_allocated == 700);
  CHECK(rows[0].memory_recorded);
  CHECK(summarize(tl).memory_recorded);
  CHECK(rows[1].comm == 0);
  CHECK(rows[0].step == 1);  // no Step ids recorded (builder phases): numbered from 1, as memcomm-trace report would
  CHECK(rows[1].step == 2);

  const RangeStats rs = range_stats(tl, 45, 60);
  CHECK(rs.collectives == 1);
  CHECK(rs.busy[static_cast<int>(LaneKind::Kernel)] == 5);
  CHECK(rs.busy[static_cast<int>(LaneKind::Collective)] == 15);
  CHECK(rs.mem_valid);
  CHECK(rs.mem_max == 700);
}

TEST_CASE("CPU runs: host phases are the compute that hides communication", "[unit][viewer]") {
  TimelineBuilder b;
  b.phase(0, "step", 0, 100);
  b.phase(0, "backward", 20, 60);
  b.collective(0, "all_reduce", 100, 0, 0, 50, 70);
  Timeline tl = b.finish("cpu");
  const auto rows = step_table(tl);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].comm == 20);
  // No memory recorded: the peaks are unknown (shown '-'), not 0 B.
  CHECK_FALSE(rows[0].memory_recorded);
  CHECK_FALSE(summarize(tl).memory_recorded);
  CHECK(rows[0].exposed_comm == 10);
}

TEST_CASE("memory curves are derived from allocator events when not sampled", "[unit][viewer]") {
  TimelineBuilder b;
  b.alloc_event(0, {0, 0x1000, 1000, 0, EventKind::SegmentAlloc});
  b.alloc_event(0, {10, 0x1000, 100, 0, EventKind::Alloc});
  b.alloc_event(0, {20, 0x1100, 200, 0, EventKind::Alloc});
  b.alloc_event(0, {30, 0x1000, 100, 0, EventKind::FreeRequested});
  b.alloc_event(0, {40, 0x1000, 100, 0, EventKind::FreeCompleted});
  b.alloc_event(0, {50, 0, 1 << 30, 0, EventKind::Oom});
  Timeline tl = b.finish("alloc");
  const RankData& rd = tl.ranks.at(0);
  const CounterSeries* allocated = rd.counter("allocated");
  const CounterSeries* active = rd.counter("active");
  const CounterSeries* reserved = rd.counter("reserved");
  REQUIRE((allocated && active && reserved && rd.counter("largest_free")));
  double v = 0;
  CHECK((allocated->value_at(25, v) && v == 300));
  CHECK((allocated->value_at(35, v) && v == 200));
  CHECK((active->value_at(35, v) && v == 300));  // pending free still active
  CHECK((active->value_at(45, v) && v == 200));
  CHECK((reserved->value_at(45, v) && v == 1000));
  REQUIRE(rd.ooms.size() == 1);
  CHECK(rd.ooms[0] == 50);
}

TEST_CASE("merging timelines remaps strings and re-matches collectives", "[unit][viewer]") {
  TimelineBuilder a, b;
  a.kernel(0, 1, "only_in_a", 0, 10);
  a.collective(0, "all_reduce", 8, 0, 1, 0, 100, 2);
  b.kernel(1, 1, "only_in_b", 5, 20);
  b.collective(1, "all_reduce", 8, 0, 1, 50, 100, 2);
  Timeline tl = a.finish("a");
  tl.merge(b.finish("b"));
  REQUIRE(tl.ranks.size() == 2);
  CHECK(tl.strings.get(tl.ranks[1].lanes[0].rows[0][0].name) == "only_in_b");
  CHECK(tl.ranks[1].collectives[0].straggler);
  CHECK_FALSE(tl.ranks[0].collectives[0].straggler);
  CHECK(tl.sources.size() == 2);
  CHECK(tl.event_count == 4);
}

namespace {
// Ranks of a run (ids its trace named) or of a snapshot (each device a stand-in), one kernel each.
Timeline ranks_named(std::initializer_list<std::uint32_t> ids, bool stand_in, const std::string& source) {
  TimelineBuilder b;
  for (const std::uint32_t id : ids) b.kernel(id, 1, source, 0, 10);
  Timeline tl = b.finish(source);
  for (RankData& rd : tl.ranks) rd.stand_in_id = stand_in;
  return tl;
}
std::vector<std::pair<std::uint32_t, std::string>> ids_and_sources(const Timeline& tl) {
  std::vector<std::pair<std::uint32_t, std::string>> out;
  for (const RankData& rd : tl.ranks) out.emplace_back(rd.rank, tl.strings.get(rd.lanes[0].rows[0][0].name));
  return out;
}
}  // namespace

TEST_CASE("a run's ranks keep their ids beside a snapshot, whichever file loads first", "[unit][viewer]") {
  using Ids = std::vector<std::pair<std::uint32_t, std::string>>;
  const Ids expect{{0, "run"}, {1, "run"}, {2, "snapshot"}};
  Timeline snapshot_first = ranks_named({0}, true, "snapshot");
  snapshot_first.merge(ranks_named({0, 1}, false, "run"));
  CHECK(ids_and_sources(snapshot_first) == expect);
  Timeline run_first = ranks_named({0, 1}, false, "run");
  run_first.merge(ranks_named({0}, true, "snapshot"));
  CHECK(ids_and_sources(run_first) == expect);
  // Two runs that both name ranks 0 and 1: the second moves to ids neither uses, in order.
  Timeline two_runs = ranks_named({0, 1}, false, "first");
  two_runs.merge(ranks_named({0, 1}, false, "second"));
  CHECK(ids_and_sources(two_runs) == Ids{{0, "first"}, {1, "first"}, {2, "second"}, {3, "second"}});
  // A rank 1 loaded beside a snapshot's device 0 and 1: nothing of the run moves.
  Timeline partial = ranks_named({0, 1}, true, "snapshot");
  partial.merge(ranks_named({1}, false, "run"));
  CHECK(ids_and_sources(partial) == Ids{{0, "snapshot"}, {1, "run"}, {2, "snapshot"}});
}

TEST_CASE("each rank shown under another id is said once, naming its file and both ids", "[unit][viewer]") {
  // Two files naming rank 0 showed ranks 0 and 1 with no word; said per merge, a rank moved twice (within
  // one load, then against what was shown) was named under its first new id and the load's files together.
  const auto from = [](std::initializer_list<std::uint32_t> ids, bool stand_in, const std::string& file) {
    Timeline tl = ranks_named(ids, stand_in, file);
    for (RankData& rd : tl.ranks) rd.source = file, rd.recorded_rank = rd.rank;
    return tl;
  };
  Timeline shown = from({0, 1}, false, "a.mct");
  std::set<std::pair<std::string, std::uint32_t>> told;
  CHECK(shown_elsewhere(shown, told).empty());
  Timeline batch = from({0}, false, "b.mct");
  batch.merge(from({0}, true, "c.json"));  // one load of two files: c's stand-in moves to 1 ...
  shown.merge(std::move(batch));           // ... and both move again against a.mct's 0 and 1
  CHECK(shown_elsewhere(shown, told) ==
        std::vector<std::string>{"warning: b.mct: rank 0 is shown as rank 2: another file holds rank 0 too",
                                 "warning: c.json: its id 0 (a stand-in: a snapshot's device, or a torch.profiler "
                                 "trace without distributedInfo) is shown as rank 3: another file holds id 0 too"});
  CHECK(shown_elsewhere(shown, told).empty());  // once
}

TEST_CASE("a synthetic run meets the viewer's memory budget per event", "[unit][viewer]") {
  SyntheticOptions o;
  o.events = 300'000;
  const Timeline tl = make_synthetic(o);
  CHECK(tl.event_count >= 250'000);
  const double per_event = static_cast<double>(tl.memory_bytes()) / static_cast<double>(tl.event_count);
  INFO("bytes/event " << per_event);
  CHECK(per_event <= 40);
  CHECK(step_table(tl).size() > 0);
}

TEST_CASE("blocks labelled with a category get per-category curves", "[unit][viewer]") {
  TimelineBuilder b;
  AllocEvent param{10, 0x1000, 400, 0, EventKind::Alloc};
  param.category = 1;  // parameter
  AllocEvent act{20, 0x2000, 100, 0, EventKind::Alloc};
  act.category = 4;  // activation
  b.alloc_event(0, {0, 0x1000, 0x10000, 0, EventKind::SegmentAlloc});
  b.alloc_event(0, param);
  b.alloc_event(0, act);
  b.alloc_event(0, {30, 0x2000, 100, 0, EventKind::FreeCompleted});  // the free carries no category
  const Timeline tl = b.finish("cats");
  const CounterSeries* p = tl.ranks[0].counter("cat:parameter");
  const CounterSeries* a = tl.ranks[0].counter("cat:activation");
  REQUIRE((p && a));
  double v = 0;
  CHECK((p->value_at(35, v) && v == 400));
  CHECK((a->value_at(25, v) && v == 100));
  CHECK((a->value_at(35, v) && v == 0));
  CHECK(tl.ranks[0].counter("cat:gradient") == nullptr);
}
