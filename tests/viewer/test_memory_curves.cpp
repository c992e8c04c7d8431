// Memory curves and step peaks from the allocator's block events rather than the trainer's periodic
// samples where the events are the whole story (Note [Memory curves from block events] in
// trace/include/memcomm/trace/allocator_fold.hpp): hand-built
// traces whose samples disagree with their events, through the builder, through an incremental
// (live) publish, and through a .mct file load.
#include "memcomm_test.hpp"

#include <memcomm/view/analysis.hpp>
#include <memcomm/view/builder.hpp>
#include <memcomm/view/loader.hpp>

#include <memcomm/trace/analysis.hpp>
#include <memcomm/trace/trace_set.hpp>
#include <memcomm/trace/trace_writer.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace memcomm::view;
using memcomm::prof::EventKind;

namespace {

// Two 100 ns steps. The block events: a 4096 B segment at t = 1; in step 0 a 1000 B block lives
// over [10, 30) beside a 24 B one from t = 5 (peak 1024), in step 1 a 2000 B block over [120, 150)
// with its free completed at 160 (peak 2024; active holds it until 160). The trainer's samples, every
// 100 ns, see none of it: allocated 512 at 0, 24 at 100 and 24 at 200.
void fill(TimelineBuilder& b, std::uint32_t rank, bool samples) {
  b.phase(rank, "step", 0, 100);
  b.phase(rank, "step", 100, 200);
  b.alloc_event(rank, {1, 0x10000, 4096, 0, EventKind::SegmentAlloc});
  b.alloc_event(rank, {5, 0x10000, 24, 0, EventKind::Alloc});
  b.alloc_event(rank, {10, 0x10100, 1000, 0, EventKind::Alloc});
  b.alloc_event(rank, {30, 0x10100, 1000, 0, EventKind::FreeRequested});
  b.alloc_event(rank, {31, 0x10100, 1000, 0, EventKind::FreeCompleted});
  b.alloc_event(rank, {120, 0x10400, 2000, 0, EventKind::Alloc});
  b.alloc_event(rank, {150, 0x10400, 2000, 0, EventKind::FreeRequested});
  b.alloc_event(rank, {160, 0x10400, 2000, 0, EventKind::FreeCompleted});
  if (!samples) return;
  for (TimeNs t : {0, 100, 200}) {
    b.counter(rank, "allocated", t, t == 0 ? 512 : 24, "B");
    b.counter(rank, "active", t, t == 0 ? 512 : 24, "B");
    b.counter(rank, "reserved", t, 8192, "B");
    b.counter(rank, "largest_free", t, 777, "B");
  }
}

double at(const CounterSeries* c, TimeNs t) {
  double v = -1;
  REQUIRE(c != nullptr);
  REQUIRE(c->value_at(t, v));
  return v;
}

}  // namespace

TEST_CASE("memory curves and step peaks follow the block events and not disagreeing samples", "[unit][viewer]") {
  TimelineBuilder b;
  fill(b, 0, true);
  const Timeline tl = b.finish("hand-built");
  const RankData& rd = tl.ranks.at(0);
  const CounterSeries* allocated = rd.counter("allocated");
  const CounterSeries* active = rd.counter("active");
  const CounterSeries* reserved = rd.counter("reserved");
  CHECK(at(allocated, 20) == 1024);
  CHECK(at(allocated, 40) == 24);
  CHECK(at(allocated, 130) == 2024);
  CHECK(at(active, 155) == 2024);  // freed at 150, its free not completed until 160
  CHECK(at(active, 165) == 24);
  CHECK(at(reserved, 50) == 4096);
  CHECK(allocated->global_max() == 2024);
  // The samples are kept beside the curves, under their own names, with their own values.
  CHECK(at(rd.counter("sampled:allocated"), 50) == 512);
  CHECK(at(rd.counter("sampled:reserved"), 50) == 8192);
  // What the events cannot give cheaply stays sampled.
  CHECK(at(rd.counter("largest_free"), 50) == 777);
  CHECK(rd.counter("largest_free")->size() == 3);

  const auto rows = step_table(tl);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].peak_allocated == 1024);  // the samples say 512
  CHECK(rows[1].peak_allocated == 2024);  // the samples say 24
  CHECK(summarize(tl).peak_allocated == 2024);
  const RangeStats rs = range_stats(tl, 100, 200);
  CHECK(rs.mem_max == 2024);
}

TEST_CASE("an event that leaves a curve unchanged adds no sample to it", "[unit][viewer]") {
  TimelineBuilder b;
  fill(b, 0, true);
  const Timeline tl = b.finish("hand-built");
  const RankData& rd = tl.ranks.at(0);
  // allocated moves on the 3 allocs and the 2 free requests (after a first value at the segment).
  CHECK(rd.counter("allocated")->size() == 6);
  CHECK(rd.counter("active")->size() == 6);  // the 3 allocs and the 2 completions
  CHECK(rd.counter("reserved")->size() == 1);
}

TEST_CASE("a rank that samples memory gets no derived largest_free, and one that samples nothing does", "[unit][viewer]") {
  // Both fold the events with the one fold (Note [Allocator fold rules]); the rank that samples
  // nothing goes through AllocatorState, whose sorted blocks also give largest_free/fragmentation.
  const auto events = [](TimelineBuilder& b) {
    fill(b, 0, false);
    b.alloc_event(0, {200, 0x100000, 1 << 20, 0, EventKind::SegmentAlloc});  // marked expandable by the map below
    b.alloc_event(0, {210, 0x100000, 8192, 0, EventKind::SegmentMap});
    b.alloc_event(0, {220, 0x100000, 6000, 0, EventKind::Alloc});
    b.alloc_event(0, {230, 0x102000, 4096, 0, EventKind::SegmentMap});
    b.alloc_event(0, {240, 0x100000, 6000, 0, EventKind::FreeRequested});
    b.alloc_event(0, {250, 0x100000, 6000, 0, EventKind::FreeCompleted});
    b.alloc_event(0, {260, 0x102000, 4096, 0, EventKind::SegmentUnmap});
    b.alloc_event(0, {265, 0x10000, 24, 0, EventKind::FreeRequested});  // an allocator frees only empty segments
    b.alloc_event(0, {266, 0x10000, 24, 0, EventKind::FreeCompleted});
    b.alloc_event(0, {270, 0x10000, 4096, 0, EventKind::SegmentFree});
  };
  TimelineBuilder sampled, unsampled;
  events(sampled);
  sampled.counter(0, "fragmentation", 0, 0.5);
  events(unsampled);
  const Timeline a = sampled.finish("sampled"), u = unsampled.finish("unsampled");
  CHECK(a.ranks[0].counter("largest_free") == nullptr);
  CHECK(u.ranks[0].counter("largest_free") != nullptr);
  for (const Timeline* t : {&a, &u}) {
    const RankData& rd = t->ranks[0];
    CHECK(at(rd.counter("reserved"), 235) == 4096 + 8192 + 4096);
    CHECK(at(rd.counter("reserved"), 275) == 8192);
    CHECK(at(rd.counter("allocated"), 225) == 6000 + 24);
    CHECK(at(rd.counter("active"), 245) == 6000 + 24);
    CHECK(at(rd.counter("active"), 255) == 24);
  }
}

TEST_CASE("live: samples published before the first block event give way to the events", "[unit][viewer]") {
  TimelineBuilder b;
  Timeline tl;
  b.phase(0, "step", 0, 100);
  b.counter(0, "allocated", 0, 512, "B");  // a sample arrives first: drawn as is for now
  b.append_to(tl);
  CHECK(at(tl.ranks[0].counter("allocated"), 0) == 512);
  b.alloc_event(0, {1, 0x10000, 4096, 0, EventKind::SegmentAlloc});
  b.alloc_event(0, {10, 0x10100, 1000, 0, EventKind::Alloc});
  b.alloc_event(0, {30, 0x10100, 1000, 0, EventKind::FreeRequested});
  b.counter(0, "allocated", 50, 0, "B");
  b.append_to(tl);
  const RankData& rd = tl.ranks[0];
  CHECK(at(rd.counter("allocated"), 20) == 1000);
  CHECK(at(rd.counter("allocated"), 40) == 0);
  const CounterSeries* s = rd.counter("sampled:allocated");
  REQUIRE(s != nullptr);
  CHECK(s->size() == 2);
  CHECK(at(s, 20) == 512);
  const auto rows = step_table(tl);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].peak_allocated == 1000);

  // The same events in one go build the same curves.
  TimelineBuilder once;
  once.phase(0, "step", 0, 100);
  once.counter(0, "allocated", 0, 512, "B");
  once.alloc_event(0, {1, 0x10000, 4096, 0, EventKind::SegmentAlloc});
  once.alloc_event(0, {10, 0x10100, 1000, 0, EventKind::Alloc});
  once.alloc_event(0, {30, 0x10100, 1000, 0, EventKind::FreeRequested});
  once.counter(0, "allocated", 50, 0, "B");
  const Timeline whole = once.finish("once");
  for (const char* name : {"allocated", "sampled:allocated", "reserved"}) {
    INFO(name);
    const CounterSeries* x = whole.ranks[0].counter(name);
    const CounterSeries* y = rd.counter(name);
    REQUIRE((x && y));
    REQUIRE(x->size() == y->size());
    for (std::size_t i = 0; i < x->size(); ++i) CHECK((x->time(i) == y->time(i) && x->value(i) == y->value(i)));
  }
}

TEST_CASE("a trace that starts mid-run draws the samples' level, not a fold missing the blocks before it", "[unit][viewer]") {
  // The first events free a 60000 B block allocated before the trace began (a range load, a late
  // attach, lost early chunks): the fold would say 1000 at its peak, the samples say 68000.
  TimelineBuilder b;
  b.phase(0, "step", 0, 100);
  b.alloc_event(0, {2, 0x900000, 60000, 0, EventKind::FreeRequested});
  b.alloc_event(0, {3, 0x900000, 60000, 0, EventKind::FreeCompleted});
  b.alloc_event(0, {10, 0x10100, 1000, 0, EventKind::Alloc});
  b.alloc_event(0, {30, 0x10100, 1000, 0, EventKind::FreeRequested});
  b.alloc_event(0, {31, 0x10100, 1000, 0, EventKind::FreeCompleted});
  b.counter(0, "allocated", 0, 68000, "B");
  b.counter(0, "allocated", 50, 8000, "B");
  b.counter(0, "reserved", 0, 70000, "B");
  const Timeline tl = b.finish("mid-run");
  const RankData& rd = tl.ranks.at(0);
  CHECK(rd.counter("sampled:allocated") == nullptr);
  CHECK(at(rd.counter("allocated"), 20) == 68000);
  CHECK(at(rd.counter("allocated"), 60) == 8000);
  CHECK(at(rd.counter("reserved"), 60) == 70000);
  CHECK(summarize(tl).peak_allocated == 68000);
}

TEST_CASE("a rank that dropped events draws its samples", "[unit][viewer]") {
  TimelineBuilder b;
  fill(b, 0, true);
  b.dropped(0, 3);  // the events that are left may miss an alloc or a free
  const Timeline tl = b.finish("drops");
  const RankData& rd = tl.ranks.at(0);
  CHECK(rd.counter("sampled:allocated") == nullptr);
  CHECK(at(rd.counter("allocated"), 20) == 512);
  CHECK(at(rd.counter("reserved"), 20) == 8192);
}

TEST_CASE("the curves fold only the device the samples describe", "[unit][viewer]") {
  // A GPU run with memcomm's allocator on device 0 and host (pinned) segments beside it: reserved
  // is device 0's segments only, allocated device 0's blocks.
  TimelineBuilder b;
  b.memory_sample_device(0, 0);
  b.counter(0, "allocated", 0, 0, "B");
  b.counter(0, "reserved", 0, 0, "B");
  b.alloc_event(0, {1, 0x10000, 4096, 0, EventKind::SegmentAlloc, 0, 0, 0});
  b.alloc_event(0, {2, 0x7000000, 1 << 20, 0, EventKind::SegmentAlloc, 0, 0, 0xFF});
  b.alloc_event(0, {3, 0x10000, 1000, 0, EventKind::Alloc, 0, 0, 0});
  b.alloc_event(0, {4, 0x7000000, 5000, 0, EventKind::Alloc, 0, 0, 0xFF});
  b.alloc_event(0, {5, 0x7000000, 5000, 0, EventKind::FreeCompleted, 0, 0, 0xFF});
  const Timeline tl = b.finish("two devices");
  const RankData& rd = tl.ranks.at(0);
  REQUIRE(rd.counter("sampled:allocated") != nullptr);  // device 0's fold is complete: in charge
  CHECK(at(rd.counter("reserved"), 10) == 4096);
  CHECK(at(rd.counter("allocated"), 10) == 1000);
  CHECK(rd.counter("allocated")->global_max() == 1000);
}

TEST_CASE("live: a GPU's samples after the host's take the curves over", "[unit][viewer]") {
  // torch.profiler's first [memory] event is often a host tensor; the GPU's come later, maybe in a
  // later publish. The host's samples go, published or not, and the GPU's fold draws the curves.
  TimelineBuilder b;
  Timeline tl;
  b.memory_sample_device(0, 0xFF);
  b.counter(0, "allocated", 0, 5000, "B");
  b.counter(0, "reserved", 0, 9000, "B");
  b.counter(0, "inactive_split", 0, 10, "B");
  b.alloc_event(0, {1, 0x7000000, 9000, 0, EventKind::SegmentAlloc, 0, 0, 0xFF});
  b.append_to(tl);
  CHECK(at(tl.ranks[0].counter("reserved"), 5) == 9000);  // the host is all there is so far
  b.memory_sample_device(0, 0);
  b.counter(0, "allocated", 10, 0, "B");
  b.counter(0, "reserved", 10, 4096, "B");
  b.alloc_event(0, {11, 0x10000, 4096, 0, EventKind::SegmentAlloc, 0, 0, 0});
  b.alloc_event(0, {12, 0x10000, 1000, 0, EventKind::Alloc, 0, 0, 0});
  b.append_to(tl);
  const RankData& rd = tl.ranks[0];
  CHECK(rd.counter("inactive_split") == nullptr);
  CHECK(rd.counter("reserved")->global_max() == 4096);
  CHECK(rd.counter("allocated")->global_max() == 1000);
  REQUIRE(rd.counter("sampled:reserved") != nullptr);
  CHECK(rd.counter("sampled:reserved")->global_max() == 4096);  // device 0's samples only
}

TEST_CASE("live: a fold that turns out incomplete gives the curves back to the samples", "[unit][viewer]") {
  TimelineBuilder b;
  Timeline tl;
  fill(b, 0, true);
  b.append_to(tl);
  CHECK(at(tl.ranks[0].counter("allocated"), 20) == 1024);  // complete so far: the fold
  b.alloc_event(0, {300, 0x990000, 7000, 0, EventKind::FreeRequested});  // a block it never saw
  b.counter(0, "allocated", 300, 100, "B");
  b.append_to(tl);
  const RankData& rd = tl.ranks[0];
  CHECK(rd.counter("sampled:allocated") == nullptr);
  CHECK(at(rd.counter("allocated"), 20) == 512);
  CHECK(at(rd.counter("allocated"), 310) == 100);
  CHECK(rd.counter("allocated")->size() == 4);
  CHECK(step_table(tl).at(0).peak_allocated == 512);
}

TEST_CASE("a rank with samples and no block events keeps its sampled curves", "[unit][viewer]") {
  TimelineBuilder b;
  b.phase(0, "step", 0, 100);
  b.counter(0, "allocated", 0, 512, "B");
  b.counter(0, "allocated", 50, 900, "B");
  b.alloc_event(0, {60, 0, 1 << 30, 0, EventKind::Oom});  // an OOM is not a block event
  const Timeline tl = b.finish("samples only");
  CHECK(tl.ranks[0].counter("sampled:allocated") == nullptr);
  CHECK(at(tl.ranks[0].counter("allocated"), 70) == 900);
  CHECK(step_table(tl).at(0).peak_allocated == 900);
  CHECK(tl.ranks[0].ooms.size() == 1);
}

TEST_CASE("a .mct trace's step peaks come from its block events", "[unit][viewer]") {
  namespace prof = memcomm::prof;
  const std::string path = memcomm::test::temp_path("memcomm_viewer_tests", "memory_curves.mct");
  {
    prof::WriterOptions o;
    o.rank = 1;
    prof::TraceWriter w(path, o);
    std::vector<prof::Event> ev;
    const auto block = [&](prof::EventKind k, std::int64_t t, std::uint64_t addr, std::uint64_t size) {
      ev.push_back(prof::Event::from(prof::make_mem_block(k, t, addr, size)));
    };
    const auto sample = [&](std::int64_t t, prof::MemMetric m, std::uint64_t v) {
      ev.push_back(prof::Event::from(prof::make_mem_sample(t, m, v)));
    };
    // The trainer's sampler fires at 0 and every 50 ms; three 1 ms steps run between two samples,
    // each allocating and freeing a 64 KiB activation over a 512 B parameter.
    sample(0, prof::MemMetric::Allocated, 512);
    sample(0, prof::MemMetric::Reserved, 1 << 20);
    sample(0, prof::MemMetric::LargestFree, 1000);
    block(prof::EventKind::SegmentAlloc, 1, 0x200000, 1 << 20);
    block(prof::EventKind::Alloc, 2, 0x200000, 512);
    for (std::int64_t s = 0; s < 3; ++s) {
      const std::int64_t t = 1'000'000 + s * 1'000'000;
      ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeBegin, t, prof::Phase::Step, 0, s, 0)));
      block(prof::EventKind::Alloc, t + 100'000, 0x210000, 65536);
      block(prof::EventKind::FreeRequested, t + 600'000, 0x210000, 65536);
      block(prof::EventKind::FreeCompleted, t + 600'000, 0x210000, 65536);
      ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeEnd, t + 900'000, prof::Phase::Step, 0, s, 0)));
    }
    sample(50'000'000, prof::MemMetric::Allocated, 512);
    w.write_chunk({}, ev);
    w.close();
  }
  Timeline tl;
  std::string error;
  REQUIRE(load_file(path, tl, error));
  const auto rows = step_table(tl);
  REQUIRE(rows.size() == 3);
  for (const auto& r : rows) CHECK(r.peak_allocated == 512 + 65536);  // the samples say 512
  CHECK(summarize(tl).peak_allocated == 512 + 65536);
  CHECK(at(tl.ranks.at(0).counter("sampled:allocated"), 10'000'000) == 512);
  CHECK(at(tl.ranks.at(0).counter("largest_free"), 10'000'000) == 1000);
}

namespace {

namespace prof = memcomm::prof;

std::string write_trace(const std::string& name, const std::vector<prof::Event>& ev) {
  const std::string path = memcomm::test::temp_path("memcomm_viewer_tests", name);
  prof::WriterOptions o;
  o.rank = 0;
  prof::TraceWriter w(path, o);
  w.write_chunk({}, ev);
  w.close();
  return path;
}

prof::Event blk(prof::EventKind k, std::int64_t t, std::uint64_t addr, std::uint64_t size, std::uint8_t device = 0) {
  return prof::Event::from(prof::make_mem_block(k, t, addr, size, device));
}
prof::Event smp(std::int64_t t, prof::MemMetric m, std::uint64_t v, std::uint8_t device = 0) {
  return prof::Event::from(prof::make_mem_sample(t, m, v, device));
}

// The viewer's curves against memcomm-trace report's memory series: at every point of the series,
// the curves hold its values (one rule, Note [Memory curves from block events]).
void check_agree(const std::string& name, const std::vector<prof::Event>& ev, bool folded) {
  INFO(name);
  const std::string path = write_trace(name + ".mct", ev);
  Timeline tl;
  std::string error;
  REQUIRE(load_file(path, tl, error));
  const prof::TraceSet set = prof::TraceSet::load({path});
  REQUIRE(set.ranks.size() == 1);
  const auto pts = prof::memory_series(set.ranks[0]);
  REQUIRE(!pts.empty());
  const RankData& rd = tl.ranks.at(0);
  CHECK((rd.counter("sampled:allocated") != nullptr) == folded);
  for (std::size_t k = 0; k < pts.size(); ++k) {
    const auto& p = pts[k];
    // A curve's value at a time is the state after its last event there; the series keeps a higher
    // state before it at the same time as a point of its own (a momentary peak).
    if (k + 1 < pts.size() && pts[k + 1].ts == p.ts) continue;
    INFO("t " << p.ts);
    double v = 0;
    if (rd.counter("allocated")->value_at(p.ts, v)) CHECK(v == static_cast<double>(p.allocated));
    if (rd.counter("active")->value_at(p.ts, v)) CHECK(v == static_cast<double>(p.active));
    if (rd.counter("reserved")->value_at(p.ts, v)) CHECK(v == static_cast<double>(p.reserved));
  }
}

}  // namespace

TEST_CASE("the viewer's curves and memcomm-trace report's memory series agree", "[unit][viewer]") {
  using K = prof::EventKind;
  using M = prof::MemMetric;
  // Complete: the fold is in charge on both sides.
  std::vector<prof::Event> whole = {blk(K::SegmentAlloc, 1, 0x10000, 1 << 20), smp(2, M::Allocated, 0), smp(2, M::Active, 0),
                                    smp(2, M::Reserved, 1 << 20)};
  for (std::int64_t s = 0; s < 20; ++s) {
    const std::int64_t t = 10 + s * 10;
    whole.push_back(blk(K::Alloc, t, 0x10000 + 0x1000 * static_cast<std::uint64_t>(s % 4), 1000 + static_cast<std::uint64_t>(s)));
    if (s >= 3) {
      const std::uint64_t a = 0x10000 + 0x1000 * static_cast<std::uint64_t>((s - 3) % 4);
      whole.push_back(blk(K::FreeRequested, t + 5, a, 0));  // the fold uses the size it was allocated with
      whole.push_back(blk(K::FreeCompleted, t + 7, a, 0));
    }
    if (s % 5 == 0) {
      whole.push_back(smp(t + 1, M::Allocated, 1));
      whole.push_back(smp(t + 1, M::Reserved, 2));
    }
  }
  check_agree("agree_whole", whole, true);
  // Mid-run: the first block frees are of blocks never seen: the samples on both sides.
  std::vector<prof::Event> mid = {smp(0, M::Allocated, 68000), smp(0, M::Active, 68000), smp(0, M::Reserved, 70000),
                                  blk(K::FreeRequested, 1, 0x900000, 60000), blk(K::FreeCompleted, 2, 0x900000, 60000),
                                  blk(K::Alloc, 3, 0x10000, 1000), smp(50, M::Allocated, 9000), smp(50, M::Active, 9000)};
  check_agree("agree_mid_run", mid, false);
  // A DropEvent: the samples on both sides.
  std::vector<prof::Event> dropped = whole;
  prof::DropEvent d{};
  d.ts = 300;
  d.kind = K::Drops;
  d.count = 2;
  dropped.push_back(prof::Event::from(d));
  check_agree("agree_dropped", dropped, false);
  // Two devices: device 0's fold, host segments left out.
  std::vector<prof::Event> two = whole;
  two.push_back(blk(K::SegmentAlloc, 15, 0x7000000, 1 << 22, 0xFF));
  two.push_back(blk(K::Alloc, 16, 0x7000000, 4096, 0xFF));
  two.push_back(smp(17, M::Allocated, 777, 0xFF));  // another device's sample: not mixed in
  check_agree("agree_two_devices", two, true);
  // The host's memory comes first (a data loader's tensor): the curves follow the GPU all the same.
  std::vector<prof::Event> host_first = {smp(0, M::Allocated, 777, 0xFF), smp(0, M::Reserved, 1 << 22, 0xFF),
                                         blk(K::SegmentAlloc, 0, 0x7000000, 1 << 22, 0xFF), blk(K::Alloc, 0, 0x7000000, 777, 0xFF)};
  host_first.insert(host_first.end(), whole.begin(), whole.end());
  check_agree("agree_host_first", host_first, true);
  const prof::TraceSet set = prof::TraceSet::load({write_trace("host_first_max.mct", host_first)});
  std::uint64_t most = 0;
  for (const auto& p : prof::memory_series(set.ranks.at(0))) most = std::max<std::uint64_t>(most, p.reserved);
  CHECK(most == 1 << 20);  // device 0's segment, never the host's 4 MiB
  // A clock offset recorded after the rank's first block events, as in a real run: the recorder
  // writes 0 when it starts and the trainer its rendezvous estimate later. Both sides shift every
  // event of the rank by the last one (Note [Clock offsets found first]), so the block events stay
  // in order and the fold stays in charge.
  const auto offset = [](std::int64_t t, std::int64_t ns) {
    return prof::Event::from(prof::make_meta(t, prof::MetaKey::ClockOffset, ns));
  };
  std::vector<prof::Event> late = {offset(0, 0)};
  late.insert(late.end(), whole.begin(), whole.begin() + 5);  // the segment, the samples, the first Alloc
  late.push_back(offset(11, -1000));
  late.push_back(prof::Event::from(prof::make_range(K::RangeBegin, 12, prof::Phase::Step, 0, 1, 0)));
  late.insert(late.end(), whole.begin() + 5, whole.end());
  check_agree("agree_late_offset", late, true);
}

TEST_CASE("a time-range load that cuts block events before its start draws the samples", "[unit][viewer]") {
  using K = prof::EventKind;
  using M = prof::MemMetric;
  // A 60000 B parameter allocated at 0.1 s and never freed, then 10 ms steps that alloc and free
  // 1000 B. Loaded from 1 s on, the fold would miss the parameter without any event saying so.
  std::vector<prof::Event> ev = {blk(K::SegmentAlloc, 0, 0x10000, 1 << 20), blk(K::Alloc, 100'000'000, 0x10000, 60000)};
  for (std::int64_t t = 200'000'000; t < 2'000'000'000; t += 10'000'000) {
    ev.push_back(blk(K::Alloc, t, 0x30000, 1000));
    ev.push_back(blk(K::FreeRequested, t + 5'000'000, 0x30000, 1000));
    ev.push_back(blk(K::FreeCompleted, t + 5'000'000, 0x30000, 1000));
    if (t % 50'000'000 == 0) {
      ev.push_back(smp(t + 1, M::Allocated, 60000));
      ev.push_back(smp(t + 1, M::Reserved, 1 << 20));
    }
  }
  const std::string path = write_trace("range_cut.mct", ev);
  Timeline full, part;
  std::string error;
  REQUIRE(load_file(path, full, error));
  CHECK(full.ranks.at(0).counter("allocated")->global_max() == 61000);  // the whole trace: the fold
  LoadOptions o;
  o.range_lo_s = 1.0;
  o.range_hi_s = 1.5;
  REQUIRE(load_file(path, part, error, nullptr, o));
  const RankData& rd = part.ranks.at(0);
  CHECK(rd.counter("sampled:allocated") == nullptr);
  CHECK(rd.counter("allocated")->global_max() == 60000);
  CHECK(at(rd.counter("allocated"), 1'200'000'000) == 60000);
}

TEST_CASE("range_min_max with a cursor agrees with the plain search in order and out of order", "[unit][viewer]") {
  CounterSeries c("allocated", "B");
  std::uint64_t x = 12345;
  const auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  TimeNs t = 0;
  for (int i = 0; i < 20000; ++i) {
    t += static_cast<TimeNs>(next() % 5);  // repeated times too
    c.add(t, static_cast<double>(next() % 1000));
  }
  c.build_levels();
  std::size_t cursor = 0;
  for (int q = 0; q < 3000; ++q) {
    // Mostly forward steps like a step table's, now and then a jump back.
    const TimeNs t0 = q % 97 == 0 ? static_cast<TimeNs>(next() % static_cast<std::uint64_t>(t)) : static_cast<TimeNs>(q) * (t / 3000);
    const TimeNs t1 = t0 + static_cast<TimeNs>(next() % 200);
    double a0 = 0, a1 = 0, b0 = 0, b1 = 0;
    const bool a = c.range_min_max(t0, t1, a0, a1);
    const bool b = c.range_min_max(t0, t1, b0, b1, cursor);
    REQUIRE(a == b);
    if (a) CHECK((a0 == b0 && a1 == b1));
  }
}
