// Recorder: exact counts under multithreaded stress, counted drops, start/stop, sinks, hooks.
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <thread>

#include "memcomm/profiler/recorder.hpp"
#include "memcomm/trace/trace_set.hpp"
#include "memcomm_test.hpp"
#include "trace_fixtures.hpp"

using namespace memcomm::prof;

namespace {
// Per-thread sequences: counter name = the thread's label id, value = sequence number.
struct Tally {
  std::map<StringId, std::vector<double>> seqs;
  uint64_t drops = 0;
  std::map<uint16_t, uint64_t> drops_by_thread;
};
Tally tally(const std::vector<Event>& events) {
  Tally t;
  for (const Event& e : events) {
    if (e.kind == EventKind::Counter) t.seqs[e.as<CounterEvent>().name].push_back(e.as<CounterEvent>().value);
    if (e.kind == EventKind::Drops) {
      t.drops += e.as<DropEvent>().count;
      t.drops_by_thread[e.as<DropEvent>().thread] += e.as<DropEvent>().count;
    }
  }
  return t;
}
}  // namespace

TEST_CASE("multithreaded recording delivers every event exactly once, in per-thread order", "[profiler][recorder]") {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100000;
  RecorderOptions opt;
  opt.ring_events = kPerThread;  // big enough that nothing may drop
  Recorder rec(opt);
  auto sink = std::make_shared<MemorySink>();
  rec.add_sink(sink);
  rec.start();
  std::vector<StringId> labels;
  for (int t = 0; t < kThreads; ++t) labels.push_back(rec.intern("thread" + std::to_string(t)));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) rec.record(make_counter(now_ns(), labels[size_t(t)], i));
    });
  for (auto& th : threads) th.join();
  rec.stop();

  Tally t = tally(sink->events());
  CHECK(t.drops == 0);
  CHECK(rec.stats().dropped == 0);
  REQUIRE(t.seqs.size() == size_t(kThreads));
  for (auto& [label, seq] : t.seqs) {
    REQUIRE(seq.size() == size_t(kPerThread));
    for (int i = 0; i < kPerThread; ++i) REQUIRE(seq[size_t(i)] == i);
  }
  const auto strings = sink->strings();
  for (int i = 0; i < kThreads; ++i) CHECK(strings[labels[size_t(i)]] == "thread" + std::to_string(i));
}

TEST_CASE("small rings drop, and every drop is counted in the trace and the stats", "[profiler][recorder]") {
  constexpr int kThreads = 3;
  constexpr int kPerThread = 200000;
  RecorderOptions opt;
  opt.ring_events = 256;
  opt.drain_interval_ms = 1;
  Recorder rec(opt);
  auto sink = std::make_shared<MemorySink>();
  rec.add_sink(sink);
  rec.start();
  const StringId label = rec.intern("x");
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) rec.record(make_counter(0, label, i));
    });
  for (auto& th : threads) th.join();
  rec.stop();
  Tally t = tally(sink->events());
  const uint64_t kept = t.seqs.count(label) ? t.seqs.at(label).size() : 0;
  CHECK(kept + t.drops == uint64_t(kThreads) * kPerThread);  // exact: kept + dropped = recorded
  CHECK(t.drops == rec.stats().dropped);
  CHECK(t.drops > 0);
}

// A started recorder with rings of 64 events whose collector does not drain during a test.
struct Undrained {
  static RecorderOptions options() {
    RecorderOptions opt;
    opt.ring_events = 64;
    opt.drain_interval_ms = 60'000;
    return opt;
  }
  Recorder rec{options()};
  std::shared_ptr<MemorySink> sink = std::make_shared<MemorySink>();
  Undrained() {
    rec.add_sink(sink);
    rec.start();
  }
};

TEST_CASE("a full ring with no draining keeps exactly its capacity", "[profiler][recorder]") {
  Undrained u;
  Recorder& rec = u.rec;
  auto& sink = u.sink;
  const uint16_t me = rec.thread_index();
  for (int i = 0; i < 1000; ++i) rec.record(make_counter(i, 1, i));
  rec.stop();
  Tally t = tally(sink->events());
  CHECK(t.seqs[1].size() == 64);
  CHECK(t.drops_by_thread[me] == 1000 - 64);
  CHECK(rec.stats().dropped == 1000 - 64);
}

TEST_CASE("a full ring drops memory events but keeps the ranges and collectives between them", "[profiler][recorder]") {
  // See Note [What a full ring keeps]: an allocator burst while the collector waits for a core.
  Undrained u;
  Recorder& rec = u.rec;
  auto& sink = u.sink;
  const StringId step = rec.intern("step");
  constexpr int kSteps = 100;
  for (int s = 0; s < kSteps; ++s) {
    PhaseScope scope(Phase::Step, uint64_t(s), Name{step, "step"}, rec);
    for (int i = 0; i < 50; ++i) rec.record(make_mem_block(EventKind::Alloc, now_ns(), 0x1000u + uint64_t(i), 512));
    rec.record(make_collective(EventKind::CollStart, now_ns(), CollOp::AllReduce, DType::F32, 1024, 0, uint32_t(s)));
  }
  rec.stop();
  size_t begins = 0, ends = 0, colls = 0, allocs = 0;
  for (const Event& e : sink->events()) {
    begins += e.kind == EventKind::RangeBegin;
    ends += e.kind == EventKind::RangeEnd;
    colls += e.kind == EventKind::CollStart;
    allocs += e.kind == EventKind::Alloc;
  }
  CHECK(begins == kSteps);
  CHECK(ends == kSteps);
  CHECK(colls == kSteps);
  CHECK(allocs < 64);  // the ring's room, shared with what came first
  CHECK(rec.stats().dropped == uint64_t(kSteps) * 50 - allocs);
}

TEST_CASE("a full ring keeps at most the rare queue's backlog, and counts the rest as dropped", "[profiler][recorder]") {
  Undrained u;  // a collector that never gets to run
  Recorder& rec = u.rec;
  auto& sink = u.sink;
  const uint64_t ranges = 2 * (Recorder::kRareBacklog + 1000);
  for (uint64_t s = 0; s < ranges / 2; ++s) PhaseScope scope(Phase::Step, s, Name{}, rec);
  rec.stop();
  uint64_t kept = 0;
  for (const Event& e : sink->events()) kept += family_of(e.kind) == EventFamily::Range;
  CHECK(kept <= 64 + Recorder::kRareBacklog);
  CHECK(kept >= Recorder::kRareBacklog);
  CHECK(rec.stats().dropped == ranges - kept);
}

TEST_CASE("start and stop any number of times and nothing is recorded while stopped", "[profiler][recorder]") {
  Recorder rec;
  auto sink = std::make_shared<MemorySink>();
  rec.add_sink(sink);
  for (int round = 0; round < 5; ++round) {
    rec.record(make_counter(0, 1, -1));  // stopped: ignored
    rec.start();
    for (int i = 0; i < 10; ++i) rec.record(make_counter(0, 1, round));
    rec.stop();
  }
  Tally t = tally(sink->events());
  REQUIRE(t.seqs[1].size() == 50);
  for (double v : t.seqs[1]) CHECK(v >= 0);
  // Identity metadata is written at every start.
  size_t rank_metas = 0;
  for (const Event& e : sink->events())
    if (e.kind == EventKind::Meta && e.as<MetaEvent>().key == MetaKey::Rank) ++rank_metas;
  CHECK(rank_metas == 5);
}

TEST_CASE("phase scopes record nested ranges and call the range hooks", "[profiler][recorder]") {
  Recorder rec;
  auto sink = std::make_shared<MemorySink>();
  rec.add_sink(sink);
  struct Log {
    std::vector<std::string> calls;
  } log;
  RangeHook hook;
  hook.ctx = &log;
  hook.on_begin = [](void* ctx, Phase p, const char* name, uint64_t id) {
    static_cast<Log*>(ctx)->calls.push_back(std::string("+") + name + ":" + std::to_string(id));
  };
  hook.on_end = [](void* ctx, Phase p) { static_cast<Log*>(ctx)->calls.push_back(std::string("-") + phase_name(p)); };
  const int slot = rec.add_range_hook(hook);
  REQUIRE(slot >= 0);
  rec.start();
  {
    PhaseScope step(Phase::Step, 7, {}, rec);
    { PhaseScope fwd(Phase::Forward, 0, rec.name("fwd_custom"), rec); }
  }
  rec.remove_range_hook(slot);
  { PhaseScope quiet(Phase::Eval, 0, {}, rec); }
  rec.stop();
  CHECK(log.calls == std::vector<std::string>{"+step:7", "+fwd_custom:0", "-forward", "-step"});
  std::vector<std::pair<EventKind, Phase>> ranges;
  for (const Event& e : sink->events())
    if (family_of(e.kind) == EventFamily::Range) ranges.emplace_back(e.kind, e.as<RangeEvent>().phase);
  CHECK(ranges == std::vector<std::pair<EventKind, Phase>>{{EventKind::RangeBegin, Phase::Step},
                                                           {EventKind::RangeBegin, Phase::Forward},
                                                           {EventKind::RangeEnd, Phase::Forward},
                                                           {EventKind::RangeEnd, Phase::Step},
                                                           {EventKind::RangeBegin, Phase::Eval},
                                                           {EventKind::RangeEnd, Phase::Eval}});
}

TEST_CASE("a file sink writes a trace the reader loads with names, identity and samplers", "[profiler][recorder]") {
  const std::string path = test::temp_path("filesink");
  {
    Recorder rec;
    Identity id;
    id.rank = 1;
    id.world_size = 2;
    rec.set_identity(id);
    WriterOptions wo;
    wo.rank = 1;
    wo.world_size = 2;
    auto sink = std::make_shared<FileSink>(path, wo, 100);
    rec.add_sink(sink);
    std::atomic<int> samples{0};
    rec.add_sampler([&](Recorder& r) {
      r.record(make_mem_sample(now_ns(), MemMetric::Allocated, 1000 + uint64_t(samples++)));
    }, std::chrono::milliseconds(1));
    rec.start();
    const Name loss = rec.name(kCounterLoss);
    for (int i = 0; i < 1000; ++i) record_counter(rec, loss, 1.0 / (i + 1));
    while (samples.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    rec.stop();
    CHECK(sink->error().empty());
    CHECK(sink->events_lost() == 0);
  }
  const TraceSet set = TraceSet::load({path});
  REQUIRE(set.ranks.size() == 1);
  const RankTrace& r = set.ranks[0];
  CHECK(r.rank == 1);
  CHECK(r.world_size == 2);
  CHECK_FALSE(r.host.empty());
  CHECK(r.drops == 0);
  size_t losses = 0, samples = 0;
  for (const Event& e : r.events) {
    if (e.kind == EventKind::Counter && r.name(e.as<CounterEvent>().name) == "loss") ++losses;
    if (e.kind == EventKind::MemSample) ++samples;
  }
  CHECK(losses == 1000);
  CHECK(samples >= 3);
  CHECK(set.files[0].recovery.chunks > 1);
  std::remove(path.c_str());
}

TEST_CASE("rank trace paths follow NAME.rankN.mct", "[profiler][recorder]") {
  CHECK(rank_trace_path("run.mct", 3) == "run.rank3.mct");
  CHECK(rank_trace_path("out/run", 0) == "out/run.rank0.mct");
}

TEST_CASE("the clock is CLOCK_MONOTONIC to within a few microseconds", "[profiler][recorder]") {
  clock_init();
  for (int i = 0; i < 100; ++i) {
    const int64_t a = monotonic_ns();
    const int64_t t = now_ns();
    const int64_t b = monotonic_ns();
    REQUIRE(t >= a - 20'000);
    REQUIRE(t <= b + 20'000);
  }
  int64_t prev = now_ns();
  for (int i = 0; i < 100000; ++i) {
    const int64_t t = now_ns();
    REQUIRE(t >= prev);
    prev = t;
  }
}

TEST_CASE("a file sink with several compression threads writes chunks in order", "[profiler][recorder]") {
  for (int threads : {0, 1, 3}) {
    const std::string path = test::temp_path("parallel");
    {
      WriterOptions wo;
      wo.rank = 5;
      FileSink sink(path, wo, 1000, threads, 4);
      const std::string name = "seq";
      const StringDef def{1, name};
      std::vector<Event> ev(777);
      int64_t n = 0;
      for (int b = 0; b < 130; ++b) {
        for (auto& e : ev) e = Event::from(make_counter(n, 1, double(n))), ++n;
        Batch batch{b == 0 ? &def : nullptr, b == 0 ? 1u : 0u, ev.data(), ev.size()};
        sink.consume(batch);
        if (b % 7 == 0) sink.flush();
      }
      sink.close();
      CHECK(sink.error().empty());
      CHECK(sink.events_written() == 130u * 777u);
    }
    LoadOptions unsorted;
    unsorted.sort = false;
    const TraceSet set = TraceSet::load({path}, unsorted);
    REQUIRE(set.ranks.size() == 1);
    CHECK(set.ranks[0].rank == 5);
    CHECK(set.ranks[0].name(1) == "seq");
    const auto& evs = set.ranks[0].events;
    REQUIRE(evs.size() == 130u * 777u);
    for (size_t i = 0; i < evs.size(); ++i) REQUIRE(evs[i].ts == int64_t(i));
    std::remove(path.c_str());
  }
}

TEST_CASE("the collector's period follows how full the rings get", "[profiler][recorder]") {
  using detail::next_drain_interval_ms;
  CHECK(next_drain_interval_ms(5, 0.0, 5, 50) == 10);     // nearly empty: back off
  CHECK(next_drain_interval_ms(40, 0.0, 5, 50) == 50);    // up to the longest period
  CHECK(next_drain_interval_ms(50, 0.0, 5, 50) == 50);
  CHECK(next_drain_interval_ms(20, 0.05, 5, 50) == 20);   // comfortable: keep
  CHECK(next_drain_interval_ms(40, 0.2, 5, 50) == 20);    // filling: halve
  CHECK(next_drain_interval_ms(8, 0.2, 5, 50) == 5);      // never under the shortest period
  CHECK(next_drain_interval_ms(50, 0.6, 5, 50) == 5);     // a burst: shortest period at once
  CHECK(next_drain_interval_ms(7, 0.0, 60'000, 50) == 60'000);  // a longest below the shortest is the shortest
  CHECK(next_drain_interval_ms(3, 0.0, 0, 0) == 1);       // periods are at least 1 ms
}

TEST_CASE("an idle collector backs off, while samplers keep their own period", "[profiler][recorder]") {
  RecorderOptions opt;
  opt.drain_interval_ms = 1;
  opt.max_drain_interval_ms = 64;
  opt.collector_priority = CollectorPriority::Normal;
  Recorder rec(opt);
  auto sink = std::make_shared<MemorySink>();
  rec.add_sink(sink);
  std::atomic<int> samples{0};
  rec.add_sampler([&](Recorder& r) {
    const int n = samples.load();
    r.record(make_counter(now_ns(), 1, n));
    samples.store(n + 1);  // counted once recorded
  }, std::chrono::milliseconds(10));
  rec.start();
  rec.record(make_counter(now_ns(), 2, 0));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const int seen = samples.load();
  rec.stop();
  const auto st = rec.stats();
  INFO("wakeups " << st.wakeups << ", samples " << seen);
  // A fixed 1 ms period would wake ~400 times; backing off to 64 ms leaves the samplers' ~40.
  CHECK(st.wakeups < 150);
  CHECK(st.collector_cpu_ns > 0);
  CHECK(seen >= 2);
  Tally t = tally(sink->events());
  CHECK(t.seqs[2].size() == 1);
  // Every sample taken before stop() is delivered, in order (a later one may race stop()).
  REQUIRE(t.seqs[1].size() >= size_t(seen));
  for (size_t i = 0; i < t.seqs[1].size(); ++i) CHECK(t.seqs[1][i] == double(i));
}

TEST_CASE("the collector runs at the priority asked for", "[profiler][recorder]") {
  for (CollectorPriority p : {CollectorPriority::Low, CollectorPriority::Idle}) {
    RecorderOptions opt;
    opt.collector_priority = p;
    Recorder rec(opt);
    std::atomic<int> nice{-100}, policy{-1};
    rec.add_sampler([&](Recorder&) {
      errno = 0;
      policy = sched_getscheduler(0);
      nice = getpriority(PRIO_PROCESS, id_t(gettid()));
    }, std::chrono::milliseconds(1));
    rec.start();
    for (int i = 0; i < 10'000 && policy.load() < 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    rec.stop();
    if (p == CollectorPriority::Low) {
      CHECK(nice.load() == 19);
    } else {
      CHECK(policy.load() == SCHED_IDLE);
    }
  }
  // The recording thread itself is left alone.
  CHECK(sched_getscheduler(0) != SCHED_IDLE);
}

// See Note [Recording across fork]: a child forked while other threads lock the recorder (the collector
// draining, a thread recording rare events) must neither wait on a copied lock nor write into the
// parent's sinks. Each child records from its forking thread and a new thread, interns, stops and
// exits; the parent's trace stays complete and holds none of their events.
// Under ASan (clang 14) malloc is not fork-safe: a child that allocates may wait on a lock of ASan's
// allocator that a parent thread (the collector, a compression worker) held at fork. glibc's malloc
// takes its locks across fork, so only the sanitizer build keeps the child from starting a thread.
TEST_CASE("a child forked while the global recorder records records nothing and never blocks", "[profiler][recorder]") {
  if (memcomm::test::kThreadSanitizer)
    MEMCOMM_SKIP_TEST("TSan does not support threads started after a multithreaded fork");
  const bool child_may_allocate = !memcomm::test::kAddressSanitizer;
  const std::string path = test::temp_path("recorder_fork");
  Recorder& rec = Recorder::global();
  auto sink = std::make_shared<FileSink>(path, WriterOptions{}, 64);
  rec.add_sink(sink);
  rec.start();
  const Name parent = rec.name("parent");
  std::atomic<bool> busy{true};
  // Keeps rare_mu_ and the string table's lock taken often (the collector takes threads_mu_). It
  // starts no threads and allocates little, for the sanitizer build's sake (child_may_allocate).
  std::thread rare([&] {
    for (int i = 0; busy.load(); ++i) {
      rec.record_rare(Event::from(make_meta(now_ns(), MetaKey::ClockOffset, 0)));
      (void)rec.intern("rare " + std::to_string(i % 50));
      record_counter(rec, parent, 1.0);
    }
  });
  int failed = 0;  // hung (killed after 20 s) or still recording
  for (int c = 0; c < 40; ++c) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      record_counter(rec, parent, 999.0);
      if (child_may_allocate) std::thread([&] { record_counter(rec, rec.name("child"), 999.0); }).join();
      rec.record_rare(Event::from(make_meta(now_ns(), MetaKey::ClockOffset, 999)));
      rec.stop();
      rec.remove_sink(sink);
      ::_exit(rec.enabled() ? 3 : 0);
    }
    if (!memcomm::test::child_exits_cleanly(pid, 20)) ++failed;
  }
  busy = false;
  rare.join();
  record_counter(rec, parent, 7.0);
  rec.stop();
  rec.remove_sink(sink);
  CHECK(failed == 0);
  const TraceSet set = TraceSet::load({path});
  REQUIRE(set.ranks.size() == 1);
  CHECK_FALSE(set.files[0].recovery.truncated);
  CHECK(set.files[0].recovery.bytes_used == set.files[0].recovery.file_bytes);
  size_t parents = 0, children = 0;
  for (const Event& e : set.ranks[0].events) {
    if (e.kind == EventKind::Counter) (e.as<CounterEvent>().value == 999.0 ? children : parents)++;
    if (e.kind == EventKind::Meta && e.as<MetaEvent>().key == MetaKey::ClockOffset && e.as<MetaEvent>().value == 999)
      ++children;
  }
  CHECK(children == 0);
  CHECK(parents > 1);
  std::remove(path.c_str());
}

// See Note [Recording across fork]: a forked child that asks for a recorder of its own gets a fresh
// global one and records into its own file; the parent's file holds the parent's events alone, and
// the parent's recorder, which the child leaves behind, goes on recording there. The parent stops
// before the fork and its sink compresses on the caller's thread, so the child allocates and starts
// its collector in a process that had one thread (ASan's malloc needs that; TSan even more).
TEST_CASE("a forked child that renews the global recorder records into a file of its own", "[profiler][recorder]") {
  if (memcomm::test::kThreadSanitizer) MEMCOMM_SKIP_TEST("TSan does not follow a collector thread across fork");
  const std::string parent_path = test::temp_path("recorder_renew_parent");
  const std::string child_path = test::temp_path("recorder_renew_child");
  Recorder& rec = Recorder::global();
  CHECK_FALSE(Recorder::renew_global_in_forked_child());  // not a forked child: nothing to renew
  auto sink = std::make_shared<FileSink>(parent_path, WriterOptions{}, 64, /*compress_threads=*/0);
  rec.add_sink(sink);
  rec.start();
  record_counter(rec, rec.name("parent"), 1.0);
  rec.stop();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const bool renewed = Recorder::renew_global_in_forked_child();
    Recorder& mine = Recorder::global();
    mine.add_sink(std::make_shared<FileSink>(child_path, WriterOptions{}, 64, /*compress_threads=*/0));
    mine.start();
    record_counter(mine, mine.name("child"), 999.0);
    std::thread([&] { record_counter(mine, mine.name("child"), 999.0); }).join();
    record_counter(rec, rec.name("inherited"), 5.0);  // the parent's recorder records nothing here
    mine.stop();
    ::_exit(renewed && &mine != &rec && rec.inherited() && !mine.inherited() ? 0 : 3);
  }
  CHECK(memcomm::test::child_exits_cleanly(pid, 20));
  rec.start();
  record_counter(rec, rec.name("parent"), 2.0);
  rec.stop();
  rec.remove_sink(sink);
  const auto counters = [](const std::string& path) {
    std::vector<double> values;
    const TraceSet set = TraceSet::load({path});
    for (const Event& e : set.ranks.at(0).events)
      if (e.kind == EventKind::Counter) values.push_back(e.as<CounterEvent>().value);
    return values;
  };
  CHECK(counters(parent_path) == std::vector<double>{1.0, 2.0});
  CHECK(counters(child_path) == std::vector<double>{999.0, 999.0});
  std::remove(parent_path.c_str());
  std::remove(child_path.c_str());
}
