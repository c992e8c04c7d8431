// memcomm-trace advise on hand-built traces, each with one known problem: every recommendation
// must appear, with the number that calls for it.
#include "memcomm/advisor/advise.hpp"
#include "memcomm/trace/trace_writer.hpp"
#include "memcomm_test.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <unistd.h>

using namespace memcomm;
using prof::Event;
using prof::EventKind;
using prof::Phase;

namespace {

constexpr int64_t kMs = 1'000'000;

// One rank's events, written as a .mct file.
struct TraceBuilder {
  uint32_t rank = 0, world = 1;
  std::vector<Event> ev;

  // Ranges pair last-in first-out per thread, as a recorder writes them: nested ones go inside
  // begin()/end() of their parent.
  void begin(Phase p, int64_t ts, uint64_t id = 0) {
    ev.push_back(Event::from(prof::make_range(EventKind::RangeBegin, ts, p, prof::kNoString, id, 0)));
  }
  void end(Phase p, int64_t ts, uint64_t id = 0) {
    ev.push_back(Event::from(prof::make_range(EventKind::RangeEnd, ts, p, prof::kNoString, id, 0)));
  }
  void range(Phase p, int64_t b, int64_t e, uint64_t id = 0) {
    begin(p, b, id);
    end(p, e, id);
  }
  void collective(prof::CollOp op, int64_t b, int64_t e, uint32_t seq, uint16_t bucket, uint64_t bytes) {
    ev.push_back(Event::from(prof::make_collective(EventKind::CollEnqueue, b, op, prof::DType::F32, bytes, 0, seq, bucket)));
    ev.push_back(Event::from(prof::make_collective(EventKind::CollStart, b, op, prof::DType::F32, bytes, 0, seq, bucket)));
    ev.push_back(Event::from(prof::make_collective(EventKind::CollEnd, e, op, prof::DType::F32, bytes, 0, seq, bucket)));
  }
  void allreduce(int64_t b, int64_t e, uint32_t seq, uint16_t bucket, uint64_t bytes) {
    collective(prof::CollOp::AllReduce, b, e, seq, bucket, bytes);
  }
  void mem(EventKind k, int64_t ts, uint64_t addr, uint64_t size) {
    ev.push_back(Event::from(prof::make_mem_block(k, ts, addr, size, 0)));
  }
  void sample(int64_t ts, prof::MemMetric m, uint64_t v) { ev.push_back(Event::from(prof::make_mem_sample(ts, m, v, 0))); }
  std::string write(const std::string& dir) const {
    const std::string path = dir + "/t.rank" + std::to_string(rank) + ".mct";
    prof::WriterOptions o;
    o.rank = rank;
    o.world_size = world;
    prof::TraceWriter w(path, o);
    w.write_chunk({}, ev);
    w.close();
    return path;
  }
};

// Ten steps of `step_ms`: forward, backward, optimizer; data wait and compute time as given.
void steps(TraceBuilder& t, int64_t step_ms, int64_t wait_ms, int64_t start = 0) {
  for (int s = 0; s < 10; ++s) {
    const int64_t b = start + s * step_ms * kMs, e = b + step_ms * kMs;
    t.begin(Phase::Step, b, uint64_t(s + 1));
    t.range(Phase::DataWait, b, b + wait_ms * kMs);
    t.range(Phase::Forward, b + wait_ms * kMs, b + (wait_ms + (step_ms - wait_ms) / 3) * kMs);
    t.range(Phase::Backward, b + (wait_ms + (step_ms - wait_ms) / 3) * kMs, e - kMs);
    t.range(Phase::Optimizer, e - kMs, e);
    t.end(Phase::Step, e, uint64_t(s + 1));
  }
}

std::vector<advise::Advice> advise_on(const std::vector<TraceBuilder>& ranks, const std::string& name,
                                      advise::AdviseOptions o = {}) {
  const auto dir = std::filesystem::temp_directory_path() / ("memcomm-advise-" + name + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<std::string> files;
  for (const auto& r : ranks) files.push_back(r.write(dir.string()));
  const auto set = prof::TraceSet::load(files);
  auto out = advise::advise(set, prof::analyze(set), files, o);
  std::filesystem::remove_all(dir);
  return out;
}

const advise::Advice* find(const std::vector<advise::Advice>& v, advise::Topic t) {
  for (const auto& a : v)
    if (a.topic == t) return &a;
  return nullptr;
}

}  // namespace

TEST_CASE("a healthy trace gets no advice") {
  TraceBuilder t;
  steps(t, 10, 0);
  CHECK(advise_on({t}, "healthy").empty());
  CHECK(advise::advice_to_text({}).find("nothing to change") != std::string::npos);
}

TEST_CASE("fragmentation: a policy and the bytes it saves, measured by replay") {
  TraceBuilder t;
  steps(t, 10, 0);
  // A 64 MiB segment per step that is never reused: reserved grows to 640 MiB for 16 MiB live.
  const uint64_t mib = 1 << 20;
  for (int s = 0; s < 10; ++s) {
    const int64_t ts = s * 10 * kMs + kMs;
    const uint64_t base = 0x10000000ULL + uint64_t(s) * 64 * mib;
    t.mem(EventKind::SegmentAlloc, ts, base, 64 * mib);
    t.mem(EventKind::Alloc, ts + 1, base, 16 * mib);
    t.mem(EventKind::FreeRequested, ts + 5 * kMs, base, 16 * mib);
    t.mem(EventKind::FreeCompleted, ts + 5 * kMs, base, 16 * mib);
  }
  const auto advice = advise_on({t}, "frag");
  const auto* a = find(advice, advise::Topic::Fragmentation);
  REQUIRE(a);
  INFO(a->evidence);
  CHECK(a->evidence.find("peak reserved 640.0 MiB") != std::string::npos);
  CHECK(a->evidence.find("97.5%") != std::string::npos);
  CHECK(a->evidence.find(" pytorch-expandable ") != std::string::npos);  // every policy replayed is listed
  CHECK(a->evidence.find(" memcomm ") != std::string::npos);
  CHECK(a->change.find("planned") == std::string::npos);
  CHECK(a->saving > 500.0 * mib);
  CHECK(a->saving_unit == "bytes");
  CHECK(advise::advice_to_json(advice).find("\"topic\": \"fragmentation\"") != std::string::npos);
}

// Two ranks of ten 20 ms steps: forward 4 ms, then `middle` (the step's begin, its step index), then
// the optimizer's last 2 ms.
template <class Middle>
std::vector<TraceBuilder> two_ranks_of_steps(Middle&& middle) {
  TraceBuilder t;
  t.world = 2;
  for (int s = 0; s < 10; ++s) {
    const int64_t b = s * 20 * kMs;
    t.begin(Phase::Step, b, uint64_t(s + 1));
    t.range(Phase::Forward, b, b + 4 * kMs);
    middle(t, b, uint32_t(s));
    t.range(Phase::Optimizer, b + 18 * kMs, b + 20 * kMs);
    t.end(Phase::Step, b + 20 * kMs, uint64_t(s + 1));
  }
  TraceBuilder r1 = t;
  r1.rank = 1;
  return {t, r1};
}

TEST_CASE("exposed communication with one bucket: fewer bytes or fewer all-reduces, a bound on the saving") {
  // Backward 6 ms, then one 40 MiB bucket all-reduced for 8 ms that nothing hides.
  const auto advice = advise_on(two_ranks_of_steps([](TraceBuilder& t, int64_t b, uint32_t s) {
                                  t.range(Phase::Backward, b + 4 * kMs, b + 10 * kMs);
                                  t.allreduce(b + 10 * kMs, b + 18 * kMs, s, 0, 40 << 20);
                                }),
                                "comm");
  INFO(advise::advice_to_text(advice));
  const auto* a = find(advice, advise::Topic::Communication);
  REQUIRE(a);
  INFO(a->evidence << " | " << a->change);
  CHECK(a->evidence.find("8.0 ms of each 20.0 ms step waits for communication (40%)") != std::string::npos);
  CHECK(a->evidence.find("1 gradient bucket(s)") != std::string::npos);
  // One bucket is one parameter past the first bucket's 1 MiB: no --bucket-mb splits it (Note [Gradient buckets]).
  CHECK(a->change.find("--bucket-mb") == std::string::npos);
  CHECK(a->change.find("--grad-compression bf16") != std::string::npos);
  CHECK(a->saving > 0);
  CHECK(a->at_most);
  CHECK(advise::saving_text(*a).rfind("at most ", 0) == 0);
}

TEST_CASE("exposed communication in a run that accumulates: double its own accumulation") {
  // Two micro-steps a step, then one 1 MiB bucket all-reduced for 8 ms: the advice said "--accum 2",
  // the run's own setting.
  const auto advice = advise_on(two_ranks_of_steps([](TraceBuilder& t, int64_t b, uint32_t s) {
                                  t.range(Phase::MicroStep, b + 1 * kMs, b + 5 * kMs, 2 * s);
                                  t.range(Phase::MicroStep, b + 5 * kMs, b + 10 * kMs, 2 * s + 1);
                                  t.allreduce(b + 10 * kMs, b + 18 * kMs, s, 0, 1 << 20);
                                }),
                                "accum");
  INFO(advise::advice_to_text(advice));
  const auto* a = find(advice, advise::Topic::Communication);
  REQUIRE(a);
  CHECK(a->change.find("--accum 4 doubles the samples per all-reduce, from --accum 2") != std::string::npos);
}

TEST_CASE("exposed all-to-all is not promised a saving from accumulation") {
  // Note [What accumulation saves] (advise.cpp): an all-to-all runs in every micro-batch.
  const auto advice = advise_on(two_ranks_of_steps([](TraceBuilder& t, int64_t b, uint32_t s) {
                                  t.collective(prof::CollOp::AllToAll, b + 4 * kMs, b + 12 * kMs, s, prof::kNoBucket, 8 << 20);
                                  t.range(Phase::Backward, b + 12 * kMs, b + 18 * kMs);
                                }),
                                "alltoall");
  INFO(advise::advice_to_text(advice));
  const auto* a = find(advice, advise::Topic::Communication);
  REQUIRE(a);
  CHECK(a->change.find("--accum") == std::string::npos);
  CHECK(a->change.find("none of it is gradient synchronisation") != std::string::npos);
  CHECK(a->saving == 0);
}

TEST_CASE("idle headroom in a run that accumulates: a micro-batch its accumulation can give") {
  // 100 MiB of 1 GiB: the memory holds about 9x. With --accum 4 or 6 that is 4x or 6x and --accum 1;
  // with 12, 6x and --accum 2; with 1, no larger micro-batch keeps the global batch; with 11 (prime) the
  // memory falls short of 11x (a run with --accum 2 was told 230x).
  const auto advice_with = [](uint32_t accum) {
    TraceBuilder t;
    for (int s = 0; s < 10; ++s) {
      const int64_t b = s * 10 * kMs;
      t.begin(Phase::Step, b, uint64_t(s + 1));
      for (uint32_t k = 0; k < accum; ++k) t.range(Phase::MicroStep, b + k * kMs, b + (k + 1) * kMs, s * accum + k);
      t.end(Phase::Step, b + 10 * kMs, uint64_t(s + 1));
    }
    t.mem(EventKind::SegmentAlloc, kMs, 0x1000000, 100 << 20);
    t.sample(kMs + 2, prof::MemMetric::DeviceTotal, 1ULL << 30);
    const auto advice = advise_on({t}, "accum" + std::to_string(accum));
    const auto* a = find(advice, advise::Topic::Headroom);
    return a ? a->change : std::string("(no headroom advice)");
  };
  CHECK_THAT(advice_with(4), Catch::Contains("raise the micro-batch 4x (--batch-size) and lower --accum from 4 to 1"));
  CHECK_THAT(advice_with(6), Catch::Contains("raise the micro-batch 6x (--batch-size) and lower --accum from 6 to 1"));
  CHECK_THAT(advice_with(12), Catch::Contains("raise the micro-batch 6x (--batch-size) and lower --accum from 12 to 2"));
  CHECK_THAT(advice_with(1), Catch::Contains("the run accumulates no micro-batches"));
  // A trace that marks no micro-steps (a Python or torch.profiler trace) may or may not accumulate.
  CHECK_THAT(advice_with(0), Catch::Contains("where the run accumulates gradients, raise the micro-batch"));
  CHECK_THAT(advice_with(0), Catch::Contains("where it does not, a larger micro-batch is a larger global batch"));
  CHECK_THAT(advice_with(11), Catch::Contains("short of the 11x that --accum 11 allows"));
}

TEST_CASE("data wait: more workers, with the wait per step") {
  TraceBuilder t;
  steps(t, 10, 3);
  const auto advice = advise_on({t}, "data");
  const auto* a = find(advice, advise::Topic::DataWait);
  REQUIRE(a);
  CHECK(a->evidence.find("waits 3.0 ms for data in each 10.0 ms step (30%, the steps after its first)") != std::string::npos);
  CHECK(a->change.find("--workers") != std::string::npos);
  CHECK(a->saving == Approx(3.0));
}

TEST_CASE("data wait: the first step's wait for the loader to start is no advice (Note [The first step's wait])") {
  // Two spawned workers: 5 s before the first batch, then data ready at once.
  TraceBuilder t;
  t.begin(Phase::Step, 0, 1);
  t.range(Phase::DataWait, 0, 5000 * kMs);
  t.range(Phase::Forward, 5000 * kMs, 5009 * kMs);
  t.end(Phase::Step, 5010 * kMs, 1);
  steps(t, 10, 0, 5010 * kMs);
  CHECK(find(advise_on({t}, "first-wait"), advise::Topic::DataWait) == nullptr);
}

TEST_CASE("data wait in a trace that marks no steps: each batch stands for one (Note [Batches for steps])") {
  // A torch.profiler trace without a schedule: DataLoader waits and operators, no ProfilerStep# spans.
  // It was told "nothing to change" while most of its loop waited for data.
  TraceBuilder t;
  for (int i = 0; i < 10; ++i) {
    const int64_t b = i * 10 * kMs;
    t.range(Phase::DataWait, b, b + (i == 0 ? 5 : 8) * kMs);
    t.range(Phase::Forward, b + 8 * kMs, b + 10 * kMs);
  }
  const auto advice = advise_on({t}, "no-steps");
  const auto* a = find(advice, advise::Topic::DataWait);
  REQUIRE(a);
  INFO(a->evidence);
  CHECK(a->evidence.find("waits 8.0 ms for data in each of its 9 batches after the first") != std::string::npos);
  CHECK(a->evidence.find("the trace marks no steps") != std::string::npos);
  CHECK(a->saving == Approx(8.0));
  CHECK(a->at_most);
}

TEST_CASE("idle headroom: a larger micro-batch, with the memory left") {
  TraceBuilder t;
  steps(t, 10, 0);
  t.mem(EventKind::SegmentAlloc, kMs, 0x1000000, 100 << 20);
  t.mem(EventKind::Alloc, kMs + 1, 0x1000000, 90 << 20);
  t.sample(kMs + 2, prof::MemMetric::DeviceTotal, 1ULL << 30);
  const auto advice = advise_on({t}, "headroom");
  const auto* a = find(advice, advise::Topic::Headroom);
  REQUIRE(a);
  CHECK(a->evidence.find("peak reserved 100.0 MiB of 1.00 GiB") != std::string::npos);
  CHECK(a->change.find("--batch-size") != std::string::npos);
  // Without a recorded capacity, the limit comes from the flag.
  TraceBuilder u;
  steps(u, 10, 0);
  u.mem(EventKind::SegmentAlloc, kMs, 0x1000000, 100 << 20);
  CHECK_FALSE(find(advise_on({u}, "nolimit"), advise::Topic::Headroom));
  advise::AdviseOptions o;
  o.memory_limit = 1ULL << 30;
  CHECK(find(advise_on({u}, "flaglimit", o), advise::Topic::Headroom));
  // A limit the run does not fit: the micro-batch must shrink.
  o.memory_limit = 50 << 20;
  const auto over = advise_on({u}, "overlimit", o);
  const auto* b = find(over, advise::Topic::Headroom);
  REQUIRE(b);
  CHECK(b->change.find("does not fit the limit: lower the micro-batch") != std::string::npos);
  CHECK(b->evidence.find("peak reserved 100.0 MiB per rank, over the limit of 50.0 MiB by 50.0 MiB") != std::string::npos);
  CHECK(b->change.find("at least 2.2x") != std::string::npos);  // 100 MiB / (0.9 x 50 MiB): all of it scales
  CHECK(b->saving == Approx(50 << 20));
}

TEST_CASE("a trace that records no reserved bytes is judged against a limit by what it allocated") {
  // torch.profiler's [memory] events of host memory hold no reserved bytes: --memory-limit was ignored
  // ("nothing to change") with 90 MiB allocated under a 50 MiB limit.
  TraceBuilder t;
  steps(t, 10, 0);
  t.mem(EventKind::Alloc, kMs + 1, 0x1000000, 90 << 20);
  advise::AdviseOptions o;
  o.memory_limit = 50 << 20;
  const auto over_advice = advise_on({t}, "allocatedover", o);
  const auto* over = find(over_advice, advise::Topic::Headroom);
  REQUIRE(over);
  CHECK(over->evidence.find("peak allocated (the trace records no reserved bytes) 90.0 MiB per rank, over the limit "
                            "of 50.0 MiB") != std::string::npos);
  o.memory_limit = 1ULL << 30;
  const auto room_advice = advise_on({t}, "allocatedroom", o);
  const auto* room = find(room_advice, advise::Topic::Headroom);
  REQUIRE(room);
  CHECK(room->evidence.find("peak allocated (the trace records no reserved bytes) 90.0 MiB of 1.00 GiB") != std::string::npos);
}

TEST_CASE("over the limit: only what scales with the micro-batch shrinks with it") {
  // 100 MiB reserved under a 50 MiB limit. Told "lower the micro-batch 2.2x" whatever the bytes were, a run
  // whose parameters and optimizer state alone were over the limit fitted at no micro-batch.
  const auto run = [](uint64_t fixed_mib) {
    TraceBuilder t;
    steps(t, 10, 0);
    t.mem(EventKind::SegmentAlloc, kMs, 0x10000000, 100 << 20);
    t.ev.push_back(Event::from(prof::make_mem_block(EventKind::Alloc, kMs + 1, 0x10000000, fixed_mib << 20, 0, 0,
                                                    prof::MemCategory::Parameter)));
    t.ev.push_back(Event::from(prof::make_mem_block(EventKind::Alloc, kMs + 2, 0x10000000 + (fixed_mib << 20),
                                                    (90 - fixed_mib) << 20, 0, 0, prof::MemCategory::Activation)));
    advise::AdviseOptions o;
    o.memory_limit = 50 << 20;
    const auto advice = advise_on({t}, "fixed" + std::to_string(fixed_mib), o);
    const auto* a = find(advice, advise::Topic::Headroom);
    REQUIRE(a);
    INFO(a->evidence << " | " << a->change);
    return *a;
  };
  const advise::Advice some = run(20);  // 80 MiB scale: (100 - 20) / (45 - 20) = 3.2x, not 2.2x
  CHECK(some.change.find("at least 3.2x") != std::string::npos);
  CHECK(some.evidence.find("20.0 MiB of it parameters, gradients, optimizer state") != std::string::npos);
  const advise::Advice none = run(48);  // 48 MiB that never shrink, over 90% of 50 MiB
  CHECK(none.change.find("does not fit the limit at any micro-batch") != std::string::npos);
}

TEST_CASE("idle headroom: what does not scale with the micro-batch does not grow with it") {
  // 100 MiB reserved under 400 MiB, 80 MiB of it parameters and optimizer state: 0.9 x 400 MiB holds
  // (360 - 80) / (100 - 80) = 14x the micro-batch, where the whole peak scaled said 3.6x.
  TraceBuilder t;
  steps(t, 10, 0);
  t.mem(EventKind::SegmentAlloc, kMs, 0x10000000, 100 << 20);
  t.ev.push_back(Event::from(prof::make_mem_block(EventKind::Alloc, kMs + 1, 0x10000000, 80 << 20, 0, 0,
                                                  prof::MemCategory::OptimizerState)));
  t.ev.push_back(Event::from(prof::make_mem_block(EventKind::Alloc, kMs + 2, 0x10000000 + (80 << 20), 10 << 20, 0, 0,
                                                  prof::MemCategory::Activation)));
  advise::AdviseOptions o;
  o.memory_limit = 400 << 20;
  const auto advice = advise_on({t}, "fixedroom", o);
  const auto* a = find(advice, advise::Topic::Headroom);
  REQUIRE(a);
  INFO(a->change);
  CHECK(a->change.find("about 14.0x larger") != std::string::npos);
}

TEST_CASE("a straggler: which rank, and where its time goes") {
  std::vector<TraceBuilder> ranks(4);
  for (uint32_t r = 0; r < 4; ++r) {
    ranks[r].rank = r;
    ranks[r].world = 4;
    const int64_t step = r == 2 ? 15 : 10;  // rank 2 computes 5 ms more per step
    steps(ranks[r], step, 0);
    for (int s = 0; s < 10; ++s) {
      const int64_t start = s * step * kMs + (step - 1) * kMs - kMs / 2;
      ranks[r].allreduce(start, start + kMs / 4, uint32_t(s), 0, 1 << 20);
    }
  }
  const auto advice = advise_on(ranks, "straggler");
  const auto* a = find(advice, advise::Topic::Straggler);
  REQUIRE(a);
  INFO(a->evidence);
  CHECK(a->change.find("rank 2") != std::string::npos);
  CHECK(a->change.find("compute") != std::string::npos);
  CHECK(a->evidence.find("against the other ranks' median of 10.0 ms") != std::string::npos);
}

TEST_CASE("of two ranks, the slower by step time is named against the other's steps, not its own") {
  // The median of both ranks' steps was the slower rank's own: it never passed the step-time test,
  // and the evidence read "15.0 ms against a median of 15.0 ms".
  std::vector<TraceBuilder> ranks(2);
  for (uint32_t r = 0; r < 2; ++r) {
    ranks[r].rank = r;
    ranks[r].world = 2;
    steps(ranks[r], r == 1 ? 15 : 10, 0);
  }
  const auto advice = advise_on(ranks, "two-ranks");
  const auto* a = find(advice, advise::Topic::Straggler);
  REQUIRE(a);
  INFO(a->evidence);
  CHECK(a->change.find("rank 1") != std::string::npos);
  CHECK(a->evidence.find("its steps take 15.0 ms against the other ranks' median of 10.0 ms") != std::string::npos);
}

TEST_CASE("a straggler whose steps are no longer than the others' is named without a cause it does not have") {
  // Rank 2 starts every all-reduce 3 ms after the others with steps like theirs: the advice said "look
  // at its data wait ... it spends -0.0 ms more per step in data wait" (a Gloo DDP run's).
  std::vector<TraceBuilder> ranks(4);
  for (uint32_t r = 0; r < 4; ++r) {
    ranks[r].rank = r;
    ranks[r].world = 4;
    steps(ranks[r], 10, 0);
    for (int s = 0; s < 10; ++s) {
      const int64_t start = s * 10 * kMs + 5 * kMs + (r == 2 ? 3 * kMs : 0);
      ranks[r].allreduce(start, s * 10 * kMs + 9 * kMs, uint32_t(s), 0, 1 << 20);
    }
  }
  const auto advice = advise_on(ranks, "late-only");
  const auto* a = find(advice, advise::Topic::Straggler);
  REQUIRE(a);
  INFO(a->change << " / " << a->evidence);
  CHECK(a->change.find("rank 2 holds the others back, and no phase of its steps is longer") != std::string::npos);
  CHECK(a->evidence.find("against the others it spends +0.00 ms in compute, +0.00 ms in data wait") != std::string::npos);
  CHECK(a->evidence.find("-0.0") == std::string::npos);
  CHECK(a->saving == 0);
}

TEST_CASE("with too few matched collectives to tell by arrivals, the slowest rank by step time is the straggler") {
  // Two matched collectives: even a rank last in both is within chance for 4 ranks.
  std::vector<TraceBuilder> ranks(4);
  for (uint32_t r = 0; r < 4; ++r) {
    ranks[r].rank = r;
    ranks[r].world = 4;
    const int64_t step = r == 2 ? 15 : 10;
    steps(ranks[r], step, 0);
    for (int s = 0; s < 2; ++s) ranks[r].allreduce((s * step + step - 2) * kMs, (s * step + step - 1) * kMs, uint32_t(s), 0, 1 << 20);
  }
  const auto advice = advise_on(ranks, "few-collectives");
  const auto* a = find(advice, advise::Topic::Straggler);
  REQUIRE(a);
  CHECK(a->change.find("rank 2") != std::string::npos);
  CHECK(a->evidence.find("collectives last") == std::string::npos);  // named by step time, not arrivals
}

TEST_CASE("matched collectives that start together name no straggler, however long one rank's steps") {
  // Rank 1 starts each step 3 ms before the others and waits for them: its steps are the longest, and
  // it holds nobody back (an 8-rank DLRM trace's advice blamed such a rank, the first to arrive).
  std::vector<TraceBuilder> ranks(4);
  for (uint32_t r = 0; r < 4; ++r) {
    ranks[r].rank = r;
    ranks[r].world = 4;
    for (int s = 0; s < 10; ++s) {
      const int64_t period = s * 20 * kMs, b = period + (r == 1 ? 0 : 3 * kMs), e = period + 15 * kMs;
      ranks[r].begin(Phase::Step, b, uint64_t(s + 1));
      ranks[r].range(Phase::DataWait, b, period + 3 * kMs);
      ranks[r].range(Phase::Forward, period + 3 * kMs, period + 8 * kMs);
      ranks[r].range(Phase::Backward, period + 8 * kMs, period + 13 * kMs);
      ranks[r].allreduce(period + 13 * kMs, period + 14 * kMs, uint32_t(s), 0, 1 << 20);
      ranks[r].range(Phase::Optimizer, period + 14 * kMs, e);
      ranks[r].end(Phase::Step, e, uint64_t(s + 1));
    }
  }
  const auto advice = advise_on(ranks, "no-straggler");
  const auto* a = find(advice, advise::Topic::Straggler);
  INFO((a ? a->change + " / " + a->evidence : std::string()));
  CHECK(a == nullptr);
}
