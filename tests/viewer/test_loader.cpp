// Loading: detection by content, clear errors that name the file, memcomm traces through the
// profiler's reader and PyTorch snapshots through memcomm_snapshot (when built in).
#include "memcomm_test.hpp"

#include <memcomm/view/loader.hpp>

#include <memcomm/trace/mixed_runs.hpp>
#include <memcomm/trace/trace_set.hpp>
#include <memcomm/trace/trace_writer.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

using namespace memcomm::view;
namespace fs = std::filesystem;

namespace {
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

LoadOptions time_range(double lo_s, double hi_s) {
  LoadOptions o;
  o.range_lo_s = lo_s;
  o.range_hi_s = hi_s;
  return o;
}
}  // namespace

TEST_CASE("garbage or empty or missing files give messages that name the file", "[unit][viewer]") {
  const std::string garbage = memcomm::test::temp_path("memcomm_viewer_tests", "garbage.bin");
  write_bytes(garbage, "GARBAGE, not a trace at all");
  Timeline tl;
  std::string error;
  CHECK_FALSE(load_file(garbage, tl, error));
  CHECK(error.find(garbage) != std::string::npos);
  CHECK(error.find("not a memcomm trace") != std::string::npos);
  CHECK(error.find("47 41 52 42") != std::string::npos);  // the first bytes, in hex

  const std::string empty = memcomm::test::temp_path("memcomm_viewer_tests", "empty.mct");
  write_bytes(empty, "");
  CHECK_FALSE(load_file(empty, tl, error));
  CHECK(error.find("empty file") != std::string::npos);

  CHECK_FALSE(load_file(memcomm::test::temp_path("memcomm_viewer_tests", "does-not-exist.mct"), tl, error));
  CHECK(error.find("cannot open") != std::string::npos);
}

TEST_CASE("inputs are recognised by content", "[unit][viewer]") {
  const std::string pickle = memcomm::test::temp_path("memcomm_viewer_tests", "fake.pickle");
  write_bytes(pickle, std::string("\x80\x04\x95", 3));
  std::string error;
  CHECK(detect_input(pickle, error) == InputKind::TorchSnapshot);
  const std::string mct = memcomm::test::temp_path("memcomm_viewer_tests", "fake.mct");
  write_bytes(mct, std::string("MEMCTRC\x1A", 8) + std::string(100, '\0'));
  CHECK(detect_input(mct, error) == InputKind::MemcommTrace);
  // A truncated pickle is refused with the reader's message, not a crash.
  Timeline tl;
  CHECK_FALSE(load_file(pickle, tl, error));
  CHECK(error.find(pickle) != std::string::npos);
  // So is a trace whose header is garbage after the magic.
  CHECK_FALSE(load_file(mct, tl, error));
  CHECK(error.find(mct) != std::string::npos);
}

TEST_CASE("a time range is refused for a PyTorch snapshot, which loads whole", "[unit][viewer]") {
  // The range used to be dropped without a word (a range past the end loaded the whole file).
  const std::string snap = std::string(MEMCOMM_SOURCE_DIR) + "/tests/data/gpu-snapshots/oom.pickle";
  Timeline tl;
  std::string error;
  CHECK_FALSE(load_file(snap, tl, error, nullptr, time_range(1e30, 1e31)));
  CHECK(error.find("oom.pickle: --range loads a time range of traces; a PyTorch memory snapshot is loaded whole") !=
        std::string::npos);
  CHECK(load_file(snap, tl, error));
}

TEST_CASE("a file with nothing to show loads with a warning that says so", "[unit][viewer]") {
  // _dump_snapshot() of a process that allocated nothing: {"segments": [], "device_traces": [[]]}
  // (pickle protocol 2). It opened as "No data. Open a trace" with no word on why.
  const std::string empty = memcomm::test::temp_path("memcomm_viewer_tests", "empty_snapshot.pickle");
  write_bytes(empty, std::string("\x80\x02\x7d\x71\x00\x28\x58\x08\x00\x00\x00" "segments" "\x71\x01\x5d\x71\x02"
                                 "\x58\x0d\x00\x00\x00" "device_traces" "\x71\x03\x5d\x71\x04\x5d\x71\x05\x61\x75\x2e",
                                 53));
  BackgroundLoad load({empty});
  const Timeline tl = load.take();
  CHECK(load.errors().empty());
  CHECK(tl.empty());
  REQUIRE(load.warnings().size() == 1);
  CHECK(load.warnings()[0] == "warning: " + empty + ": nothing to show: it holds no timed events and no memory");
  // python -m memcomm on a script that trained nothing: a rank's metadata alone loaded with no word.
  namespace prof = memcomm::prof;
  const std::string meta = memcomm::test::temp_path("memcomm_viewer_tests", "meta_only.rank0.mct");
  {
    prof::TraceWriter w(meta, prof::WriterOptions{});
    w.write_chunk({{1, "host-a"}}, {prof::Event::from(prof::make_meta(10, prof::MetaKey::Rank, 0)),
                                    prof::Event::from(prof::make_meta(10, prof::MetaKey::Host, 0, 1))});
    w.close();
  }
  BackgroundLoad only_meta({meta});
  CHECK(only_meta.take().shows_nothing());
  REQUIRE(only_meta.warnings().size() == 1);
  CHECK(only_meta.warnings()[0] == "warning: " + meta + ": nothing to show: it holds no timed events and no memory");
  std::remove(meta.c_str());
}

TEST_CASE("a snapshot whose clock steps back loads with the warning memcomm-trace memory gives", "[unit][viewer]") {
  // pickle.dumps({"device_traces": [[alloc 100 B at 20 us, alloc 50 B at 10 us]]}, protocol=2)
  const unsigned char bytes[] = {
      128, 2, 125, 113, 0, 88, 13, 0, 0, 0, 100, 101, 118, 105, 99, 101, 95, 116, 114, 97, 99, 101, 115, 113, 1, 93,
      113, 2, 93, 113, 3, 40, 125, 113, 4, 40, 88, 6, 0, 0, 0, 97, 99, 116, 105, 111, 110, 113, 5, 88, 5, 0, 0, 0,
      97, 108, 108, 111, 99, 113, 6, 88, 4, 0, 0, 0, 97, 100, 100, 114, 113, 7, 77, 0, 16, 88, 4, 0, 0, 0, 115, 105,
      122, 101, 113, 8, 75, 100, 88, 7, 0, 0, 0, 116, 105, 109, 101, 95, 117, 115, 113, 9, 75, 20, 117, 125, 113,
      10, 40, 104, 5, 104, 6, 104, 7, 77, 0, 32, 104, 8, 75, 50, 104, 9, 75, 10, 117, 101, 97, 115, 46};
  const std::string path = memcomm::test::temp_path("memcomm_viewer_tests", "steps_back.pickle");
  write_bytes(path, std::string(reinterpret_cast<const char*>(bytes), sizeof bytes));
  BackgroundLoad load({path});
  const Timeline tl = load.take();
  CHECK(load.errors().empty());
  REQUIRE(load.warnings().size() == 1);
  CHECK(load.warnings()[0] == "warning: " + path + ": its events' time_us goes back 1 time (by up to 10 us): such an event "
                              "is read at the time of the one before it, so lifetimes follow the events' order");
  REQUIRE(tl.ranks.size() == 1);
  CHECK(memcomm::prof::peak_live(tl.ranks[0].allocations).bytes == 150);
}

TEST_CASE("a snapshot's devices are named devices, its host memory host memory, and a second file's keep their own names",
          "[unit][viewer]") {
  // pickle.dumps({"segments": [a 2 MiB segment on device 0], "device_traces": [[alloc 100 B]],
  //               "allocator_settings": {"memcomm": True, "host": True}}, protocol=2): memcomm's CPU allocator's
  // snapshot (Note [A host snapshot's device]). Every pane titled it "rank 255".
  const unsigned char bytes[] = {
      128, 2, 125, 113, 0, 40, 88, 8, 0, 0, 0, 115, 101, 103, 109, 101, 110, 116, 115, 113, 1, 93, 113, 2, 125, 113,
      3, 40, 88, 6, 0, 0, 0, 100, 101, 118, 105, 99, 101, 113, 4, 75, 0, 88, 7, 0, 0, 0, 97, 100, 100, 114, 101,
      115, 115, 113, 5, 77, 0, 16, 88, 10, 0, 0, 0, 116, 111, 116, 97, 108, 95, 115, 105, 122, 101, 113, 6, 74, 0,
      0, 32, 0, 88, 6, 0, 0, 0, 98, 108, 111, 99, 107, 115, 113, 7, 93, 113, 8, 117, 97, 88, 13, 0, 0, 0, 100, 101,
      118, 105, 99, 101, 95, 116, 114, 97, 99, 101, 115, 113, 9, 93, 113, 10, 93, 113, 11, 125, 113, 12, 40, 88, 6,
      0, 0, 0, 97, 99, 116, 105, 111, 110, 113, 13, 88, 5, 0, 0, 0, 97, 108, 108, 111, 99, 113, 14, 88, 4, 0, 0, 0,
      97, 100, 100, 114, 113, 15, 77, 0, 16, 88, 4, 0, 0, 0, 115, 105, 122, 101, 113, 16, 75, 100, 88, 7, 0, 0, 0,
      116, 105, 109, 101, 95, 117, 115, 113, 17, 75, 1, 117, 97, 97, 88, 18, 0, 0, 0, 97, 108, 108, 111, 99, 97,
      116, 111, 114, 95, 115, 101, 116, 116, 105, 110, 103, 115, 113, 18, 125, 113, 19, 40, 88, 7, 0, 0, 0, 109,
      101, 109, 99, 111, 109, 109, 113, 20, 136, 88, 4, 0, 0, 0, 104, 111, 115, 116, 113, 21, 136, 117, 117, 46};
  const std::string a = memcomm::test::temp_path("memcomm_viewer_tests", "host_a.pickle");
  const std::string b = memcomm::test::temp_path("memcomm_viewer_tests", "host_b.pickle");
  write_bytes(a, std::string(reinterpret_cast<const char*>(bytes), sizeof bytes));
  write_bytes(b, std::string(reinterpret_cast<const char*>(bytes), sizeof bytes));
  BackgroundLoad one({a});
  const Timeline alone = one.take();
  REQUIRE(alone.ranks.size() == 1);
  CHECK(alone.ranks[0].rank == 255);
  CHECK(rank_name(alone.ranks[0]) == "host memory");
  BackgroundLoad two({a, b});
  const Timeline both = two.take();
  REQUIRE(both.ranks.size() == 2);
  CHECK(rank_name(both.ranks[0]) == "host memory (id 0)");  // moved off 255 (Note [Rank ids across files])
  CHECK(rank_name(both.ranks[1]) == "host memory");
  RankData run;
  run.rank = 3;
  CHECK(rank_name(run) == "rank 3");
  run.snapshot_device = 3;  // a snapshot's GPU 3: one process's devices are no ranks
  CHECK(rank_name(run) == "device 3");
}

TEST_CASE("background loads merge files and collect errors", "[unit][viewer]") {
  const std::string garbage = memcomm::test::temp_path("memcomm_viewer_tests", "garbage2.bin");
  write_bytes(garbage, "definitely not a trace");
  BackgroundLoad load({garbage});
  Timeline tl = load.take();
  CHECK(load.done());
  CHECK(load.progress() == Approx(1.0));
  REQUIRE(load.errors().size() == 1);
  CHECK(load.errors()[0].find(garbage) != std::string::npos);
  CHECK(tl.empty());
}

TEST_CASE("the viewer finds the same signs of several runs as memcomm-trace", "[unit][viewer]") {
  // See Note [One run or several]: each rank records [start + 1000, start + 5000] ns of wall-clock time
  // on its host's monotonic clock from `boot` on, moved onto the run's timeline by `offset`.
  using namespace memcomm::prof;
  const auto write = [](const std::string& path, uint32_t rank, uint32_t world, int64_t start, int64_t boot,
                        int64_t offset) {
    WriterOptions o;
    o.rank = rank;
    o.world_size = world;
    TraceWriter w(path, o);
    w.write_chunk({{1, "x"}}, {Event::from(make_meta(boot, MetaKey::ClockOffset, offset)),
                               Event::from(make_meta(boot, MetaKey::StartTime, start)),
                               Event::from(make_counter(boot + 1000, 1, 1.0)), Event::from(make_counter(boot + 5000, 1, 2.0))});
  };
  const auto path = [](const char* name) { return memcomm::test::temp_path("memcomm_viewer_tests", name); };
  const std::string a = path("run_a0.mct"), b = path("run_a1.mct"), c = path("run_b1.mct"), d = path("run_c1.mct");
  write(a, 0, 2, 1'000'000, 0, 0);
  write(b, 1, 2, 1'003'000, int64_t(7) << 40, -(int64_t(7) << 40));  // the same run on another host
  write(c, 1, 2, 9'000'000, 0, 0);                                    // long after rank 0 stopped
  write(d, 5, 4, 1'000'000, 0, 0);                                    // outside its world, and a's is 2
  // torch.profiler traces on the Unix clock: rank 1 an hour after rank 0 (its times after baseTimeNanoseconds).
  const auto kineto = [&](const char* name, int rank, const std::string& top, int64_t ts_us) {
    std::ofstream(path(name)) << "{" << top << R"("distributedInfo": {"rank": )" << rank
                              << R"(, "world_size": 2}, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0,
                              "tid": 7, "ts": )" << ts_us << R"(, "dur": 5000, "args": {"device": 0, "stream": 7}}]})";
    return path(name);
  };
  const std::string k0 = kineto("run_k0.json", 0, "", int64_t(1694128201) * 1000000);
  const std::string k1 = kineto("run_k1.json", 1, R"("baseTimeNanoseconds": 1694128201000000000, )", int64_t(3600) * 1000000);
  for (const bool ahead : {false, true}) {
    memcomm::view::LoadOptions opt;
    opt.decode_ahead = ahead;
    for (const auto& files : std::vector<std::vector<std::string>>{{a, b}, {a, c}, {a, d}, {k0, k1}}) {
      Timeline tl;
      for (const auto& f : files) {
        Timeline one;
        std::string error;
        REQUIRE(load_file(f, one, error, nullptr, opt));
        tl.merge(std::move(one));
      }
      INFO(files[1] << (ahead ? " decoded ahead" : ""));
      CHECK(mixed_run_warnings(tl.runs) == TraceSet::load(files).mixed_runs());
    }
  }
  Timeline tl;
  std::string error;
  REQUIRE(load_file(c, tl, error));
  REQUIRE(tl.runs.size() == 1);
  CHECK(tl.runs[0].world_size == 2);
  CHECK(tl.runs[0].wall_begin == 9'000'000);  // from its first event, the StartTime record
  CHECK(tl.runs[0].wall_end == 9'005'000);
  CHECK(TraceSet::load({a, c}).mixed_runs().size() == 1);  // the comparisons above compared something
  CHECK(TraceSet::load({a, d}).mixed_runs().size() == 2);
  CHECK(TraceSet::load({k0, k1}).mixed_runs().size() == 1);
  for (const auto& p : {a, b, c, d, k0, k1}) std::remove(p.c_str());
}

TEST_CASE("a memcomm trace loads into lanes and collectives and memory curves", "[unit][viewer]") {
  namespace prof = memcomm::prof;
  const std::string path = memcomm::test::temp_path("memcomm_viewer_tests", "two_ranks.mct");
  {
    prof::WriterOptions wo;
    wo.merged = true;
    prof::TraceWriter w(path, wo);
    for (std::uint32_t rank = 0; rank < 2; ++rank) {
      std::vector<prof::StringDef> strings = {{1, "gemm_kernel"}};
      std::vector<prof::Event> ev;
      ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeBegin, 0, prof::Phase::Step, 0, 3, 0)));
      ev.push_back(prof::Event::from(prof::make_compute(prof::EventKind::Kernel, 100, 600, 7, 1)));
      ev.push_back(prof::Event::from(prof::make_collective(prof::EventKind::CollStart, 500 + rank * 100, prof::CollOp::AllReduce,
                                                           prof::DType::F32, 1 << 20, 0, 9)));
      ev.push_back(prof::Event::from(prof::make_collective(prof::EventKind::CollEnd, 900, prof::CollOp::AllReduce,
                                                           prof::DType::F32, 1 << 20, 0, 9)));
      ev.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::SegmentAlloc, 50, 0x100000, 1 << 20)));
      ev.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::Alloc, 60, 0x100000, 4096)));
      ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeEnd, 1000, prof::Phase::Step, 0, 3, 0)));
      w.write_chunk(strings, ev, rank);
    }
    w.close();
  }
  Timeline tl;
  std::string error;
  REQUIRE(load_file(path, tl, error));
  INFO(error);
  REQUIRE(tl.ranks.size() == 2);
  CHECK(tl.event_count == 10);  // model entities: a range or collective begin/end pair is one
  const RankData& r1 = tl.ranks[1];
  REQUIRE(r1.collectives.size() == 1);
  CHECK(r1.collectives[0].straggler);  // rank 1 started at 600, rank 0 at 500
  CHECK(r1.collectives[0].bytes == (1u << 20));
  bool kernel = false, step = false;
  for (const auto& lane : r1.lanes) {
    if (lane.kind == LaneKind::Kernel && tl.strings.get(lane.rows.at(0).at(0).name) == "gemm_kernel") kernel = true;
    if (lane.kind == LaneKind::Phase && tl.strings.get(lane.rows.at(0).at(0).name) == "step") step = lane.rows[0][0].payload == 3;
  }
  CHECK(kernel);
  CHECK(step);
  double v = 0;
  REQUIRE(r1.counter("allocated"));
  CHECK((r1.counter("allocated")->value_at(70, v) && v == 4096));
}

TEST_CASE("a step written after the begin of the forward it holds spans its iteration (Note [Pairing a range's end])",
          "[unit][viewer]") {
  // python -m memcomm dates a step's begin back to the forward that marked it and may write it after that
  // forward's begin: the viewer closed the step at the forward's end (a 15 ms step where the CLI said 88).
  namespace prof = memcomm::prof;
  const std::string path = memcomm::test::temp_path("memcomm_viewer_tests", "late_step.rank0.mct");
  {
    prof::TraceWriter w(path, prof::WriterOptions{});
    std::vector<prof::Event> ev;
    const auto range = [&](prof::EventKind k, std::int64_t ts, prof::Phase p, std::uint64_t id) {
      ev.push_back(prof::Event::from(prof::make_range(k, ts, p, 0, id, 0)));
    };
    using K = prof::EventKind;
    range(K::RangeBegin, 200, prof::Phase::Forward, 0);
    range(K::RangeBegin, 100, prof::Phase::Step, 1);  // written second, dated first
    range(K::RangeEnd, 300, prof::Phase::Forward, 0);
    range(K::RangeBegin, 400, prof::Phase::Backward, 0);
    range(K::RangeEnd, 500, prof::Phase::Backward, 0);
    range(K::RangeEnd, 900, prof::Phase::Step, 1);
    w.write_chunk({}, ev, 0);
    w.close();
  }
  Timeline tl;
  std::string error;
  REQUIRE(load_file(path, tl, error));
  REQUIRE(tl.ranks.size() == 1);
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> spans;
  for (const auto& lane : tl.ranks[0].lanes)
    if (lane.kind == LaneKind::Phase)
      for (const auto& row : lane.rows)
        for (const auto& span : row) spans[tl.strings.get(span.name)] = {span.start - tl.begin, span.end - tl.begin};
  CHECK(spans["step"] == std::make_pair<std::int64_t, std::int64_t>(0, 800));
  CHECK(spans["forward"] == std::make_pair<std::int64_t, std::int64_t>(100, 200));
  CHECK(spans["backward"] == std::make_pair<std::int64_t, std::int64_t>(300, 400));
  std::remove(path.c_str());
}

TEST_CASE("a shared PyTorch snapshot loads with allocator events and memory curves", "[unit][viewer]") {
  const std::string path = memcomm::test::shared_snapshots_dir() + "/eor_nn__snapshot.pickle";
  if (!fs::exists(path)) MEMCOMM_SKIP_TEST("shared snapshot not found: " + path);
  Timeline tl;
  std::string error;
  INFO(error);
  REQUIRE(load_file(path, tl, error));
  REQUIRE_FALSE(tl.ranks.empty());
  CHECK(tl.ranks[0].alloc_events.size() > 100);
  REQUIRE(tl.ranks[0].counter("reserved"));
  CHECK(tl.ranks[0].counter("reserved")->global_max() > 0);
}

TEST_CASE("a range over a trace with corrupt events measures the span from the events it keeps", "[unit][viewer]") {
  // A fuzzed .mct: events of no known kind with times far apart made the span from the first event
  // (and the range's start) theirs, and the message's span overflowed (UBSan).
  namespace prof = memcomm::prof;
  const std::string path = memcomm::test::temp_path("memcomm_viewer_tests", "corrupt_times.mct");
  {
    prof::TraceWriter w(path, prof::WriterOptions{});
    std::vector<prof::Event> ev;
    for (const std::int64_t ts : {INT64_MIN + 1, INT64_MAX - 1}) {
      prof::Event bad{};
      bad.ts = ts;  // kind Invalid
      ev.push_back(bad);
    }
    ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeBegin, 1'000'000, prof::Phase::Step, 0, 1, 0)));
    ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeEnd, 3'000'000, prof::Phase::Step, 0, 1, 0)));
    w.write_chunk({}, ev, 0);
    w.close();
  }
  Timeline tl;
  std::string error;
  CHECK_FALSE(load_file(path, tl, error, nullptr, time_range(1000, 2000)));
  CHECK(error.find("--range 1000:2000 keeps no event: this file's events span 0..0.002 s") != std::string::npos);
  INFO(error);
  CHECK(load_file(path, tl, error, nullptr, time_range(0.001, 0.0015)));  // from the step's begin, not the corrupt time
}
