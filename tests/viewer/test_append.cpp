// Incremental append (Note [Incremental append] in viewer/model/timeline_append.cpp): publishing a
// run in pieces with TimelineBuilder::append_to() gives, field by field, the model that finish()
// builds from all of it at once, including when pieces arrive out of time order; and
// AllocatorTimeline::update() gives the states of a timeline built over all events.
#include "memcomm_test.hpp"

#include <memcomm/view/allocator_state.hpp>
#include <memcomm/view/analysis.hpp>
#include <memcomm/view/builder.hpp>

#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace memcomm::view;
using memcomm::prof::EventKind;

namespace {

using Feed = std::function<void(TimelineBuilder&)>;

// A two-rank run as a list of feeds in arrival order: nested phases published when they end
// (children first), kernels on two streams (some overlapping), memcpys, NVTX ranges, matched
// collectives, sampled counters on rank 0, allocator events with an expandable segment (its map
// arrives in a later feed than its reservation) and categories that appear only halfway.
std::vector<Feed> make_run(int steps, bool late_pieces) {
  std::vector<Feed> feeds;
  for (int s = 0; s < steps; ++s) {
    for (std::uint32_t rank = 0; rank < 2; ++rank) {
      const TimeNs t = 1'000'000 + s * 1'000'000 + rank * 3'000;
      feeds.push_back([=](TimelineBuilder& b) {
        for (int k = 0; k < 12; ++k) {
          const TimeNs kt = t + 1'000 + k * 50'000;
          // Every fifth kernel overlaps the next one: the lane needs a second row.
          b.kernel(rank, k % 2, k % 3 ? "gemm" : "softmax", kt, kt + (k % 5 == 0 ? 120'000 : 40'000));
        }
        b.memcpy(rank, 2, "memcpy HtoD", t + 5'000, t + 9'000);
        b.nvtx(rank, "inner", t + 100'000, t + 150'000);
        b.phase(rank, "forward", t, t + 400'000);
        b.phase(rank, "backward", t + 400'000, t + 800'000);
      });
      // The enclosing ranges end later, so they are published after what they enclose.
      feeds.push_back([=](TimelineBuilder& b) {
        b.nvtx(rank, "outer", t + 90'000, t + 300'000);
        b.phase(rank, "step", t, t + 900'000);
        b.collective(rank, "all_reduce", 1 << 20, 0, static_cast<std::uint64_t>(s), t + 600'000 + rank * 7'000,
                     t + 700'000, 2);
        if (rank == 0) {
          b.counter(rank, "loss", t + 850'000, 1.0 / (s + 1));
          b.counter(rank, "samples_per_s", t + 860'000, 1000.0 + s);
        }
        const std::uint64_t base = 0x7f0000000000ull;
        if (s == 0) b.alloc_event(rank, {t + 10, base, 128ull << 30, 0, EventKind::SegmentAlloc});  // virtual range
        if (s == 1) b.alloc_event(rank, {t + 11, base, 2u << 20, 0, EventKind::SegmentMap});      // a step later
        if (s >= 1) {
          const std::uint8_t cat = s > steps / 2 ? static_cast<std::uint8_t>(1 + s % 4) : 0;
          AllocEvent a{t + 20, base + static_cast<std::uint64_t>(s % 4) * 4096, 4096, 0, EventKind::Alloc, cat};
          b.alloc_event(rank, a);
          b.alloc_event(rank, {t + 500'000, a.addr, 4096, 0, EventKind::FreeRequested});
          b.alloc_event(rank, {t + 600'000, a.addr, 4096, 0, EventKind::FreeCompleted});
        }
        if (s == steps - 1) b.alloc_event(rank, {t + 700'000, 0, 1ull << 40, 0, EventKind::Oom});
        // A 1 MiB pool segment on rank 1, allocated and freed.
        if (rank == 1 && s % 3 == 0) {
          b.alloc_event(rank, {t + 30, 0x1000000 + static_cast<std::uint64_t>(s) * (1 << 20), 1 << 20, 1, EventKind::SegmentAlloc});
          b.alloc_event(rank, {t + 40, 0x1000000 + static_cast<std::uint64_t>(s) * (1 << 20), 1 << 20, 1, EventKind::SegmentFree});
        }
        b.dropped(rank, s == 2 ? 5 : 0);
      });
      if (late_pieces && s % 4 == 3) {  // events that belong before what was already published
        const TimeNs late = t - 2'500'000;
        feeds.push_back([=](TimelineBuilder& b) {
          b.kernel(rank, 0, "late_kernel", late, late + 1'000);
          // Nested in a published "outer" of three steps before, before its "inner".
          const TimeNs before = t - 3'000'000;
          b.nvtx(rank, "late_inner", before + 95'000, before + 99'000);
          b.counter(rank, "loss", late + 5, -1.0 * s);
          b.alloc_event(rank, {late + 7, 0x9000000 + static_cast<std::uint64_t>(s), 64, 0, EventKind::Alloc});
          b.collective(rank, "broadcast", 64, 1, static_cast<std::uint64_t>(s), late + 100, late + 200, 2);
        });
      }
    }
  }
  return feeds;
}

void check_same_spans(const SpanRow& a, const SpanRow& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("span " << i);
    CHECK(a[i].start == b[i].start);
    CHECK(a[i].end == b[i].end);
    CHECK(a[i].name == b[i].name);
    CHECK(a[i].payload == b[i].payload);
  }
}

void check_same_counter(const CounterSeries& a, const CounterSeries& b, TimeNs t0, TimeNs t1) {
  INFO("counter " << a.name());
  CHECK(a.name() == b.name());
  CHECK(a.unit() == b.unit());
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a.time(i) == b.time(i));
    CHECK(a.value(i) == b.value(i));
  }
  CHECK(a.level_count() == b.level_count());
  CHECK(a.global_max() == b.global_max());
  for (int px : {1, 7, 300}) {  // the LOD levels answer queries alike at every zoom
    std::vector<PixelMinMax> qa, qb;
    a.query(t0, t1, px, qa);
    b.query(t0, t1, px, qb);
    for (std::size_t i = 0; i < qa.size(); ++i) {
      CHECK(qa[i].valid == qb[i].valid);
      CHECK(qa[i].min == qb[i].min);
      CHECK(qa[i].max == qb[i].max);
    }
  }
}

void check_same(const Timeline& a, const Timeline& b) {
  REQUIRE(a.strings.size() == b.strings.size());
  for (std::uint32_t i = 0; i < a.strings.size(); ++i) CHECK(a.strings.get(i) == b.strings.get(i));
  CHECK(a.begin == b.begin);
  CHECK(a.end == b.end);
  CHECK(a.event_count == b.event_count);
  REQUIRE(a.ranks.size() == b.ranks.size());
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    const RankData &x = a.ranks[r], &y = b.ranks[r];
    INFO("rank slot " << r);
    CHECK(x.rank == y.rank);
    CHECK(x.dropped == y.dropped);
    REQUIRE(x.lanes.size() == y.lanes.size());
    for (std::size_t l = 0; l < x.lanes.size(); ++l) {
      INFO("lane " << x.lanes[l].name);
      CHECK(x.lanes[l].name == y.lanes[l].name);
      CHECK(x.lanes[l].kind == y.lanes[l].kind);
      CHECK(x.lanes[l].stream == y.lanes[l].stream);
      REQUIRE(x.lanes[l].rows.size() == y.lanes[l].rows.size());
      for (std::size_t k = 0; k < x.lanes[l].rows.size(); ++k) check_same_spans(x.lanes[l].rows[k], y.lanes[l].rows[k]);
    }
    REQUIRE(x.collectives.size() == y.collectives.size());
    for (std::size_t i = 0; i < x.collectives.size(); ++i) {
      const Collective &c = x.collectives[i], &d = y.collectives[i];
      INFO("collective " << i);
      CHECK(c.start == d.start);
      CHECK(c.seq == d.seq);
      CHECK(c.comm == d.comm);
      CHECK(c.group_size == d.group_size);
      CHECK(c.next_rank == d.next_rank);
      CHECK(c.next_index == d.next_index);
      CHECK(c.straggler == d.straggler);
      CHECK(c.skew == d.skew);
      CHECK(c.busbw == d.busbw);
    }
    REQUIRE(x.counters.size() == y.counters.size());
    for (std::size_t i = 0; i < x.counters.size(); ++i) check_same_counter(x.counters[i], y.counters[i], a.begin, a.end);
    REQUIRE(x.alloc_events.size() == y.alloc_events.size());
    for (std::size_t i = 0; i < x.alloc_events.size(); ++i) {
      INFO("alloc event " << i);
      CHECK(x.alloc_events[i].t == y.alloc_events[i].t);
      CHECK(x.alloc_events[i].addr == y.alloc_events[i].addr);
      CHECK(x.alloc_events[i].op == y.alloc_events[i].op);
      CHECK(x.alloc_events[i].flags == y.alloc_events[i].flags);
    }
    CHECK(x.ooms == y.ooms);
    REQUIRE(x.allocations.list.size() == y.allocations.list.size());
    for (std::size_t i = 0; i < x.allocations.list.size(); ++i) {
      INFO("allocation " << i);
      CHECK(x.allocations.list[i].alloc_ns == y.allocations.list[i].alloc_ns);
      CHECK(x.allocations.list[i].free_ns == y.allocations.list[i].free_ns);
      CHECK(x.allocations.list[i].addr == y.allocations.list[i].addr);
      CHECK(x.allocations.list[i].size == y.allocations.list[i].size);
    }
    for (TimeNs t = a.begin; t <= a.end; t += (a.end - a.begin) / 7 + 1)
      CHECK(x.alloc_index.live_at(x.allocations, t).bytes == y.alloc_index.live_at(y.allocations, t).bytes);
  }
}

Timeline at_once(const std::vector<Feed>& feeds) {
  TimelineBuilder b;
  for (const auto& f : feeds) f(b);
  return b.finish("run");
}

}  // namespace

TEST_CASE("appending a run in pieces gives the model that loading it at once gives") {
  const bool late = GENERATE(false, true);
  INFO((late ? "with" : "without") << " late pieces");
  const auto feeds = make_run(24, late);
  const Timeline whole = at_once(feeds);
  for (std::size_t piece : {std::size_t{1}, std::size_t{3}, std::size_t{10}}) {
    INFO("pieces of " << piece << " feeds");
    TimelineBuilder b;
    Timeline tl;
    tl.sources.push_back("run");
    std::uint64_t published = 0;
    std::vector<StepRow> steps;  // kept up to date as AppState::appended() does
    for (std::size_t i = 0; i < feeds.size(); ++i) {
      feeds[i](b);
      if ((i + 1) % piece == 0 || i + 1 == feeds.size()) {
        const AppendResult r = b.append_to(tl);
        published += r.events;
        CHECK(r.alloc_from.size() == tl.ranks.size());
        steps = r.ranks_added ? step_table(tl) : step_table(tl, steps, r.first_time);
        if (i % 7 == 0) b.refresh_allocations(tl);  // live mode rebuilds them at its own pace
      }
    }
    b.refresh_allocations(tl);  // Note [Live allocations]
    CHECK_FALSE(b.refresh_allocations(tl));  // nothing new since
    CHECK(published == whole.event_count);
    check_same(whole, tl);
    const auto all_steps = step_table(whole);
    REQUIRE(steps.size() == all_steps.size());
    for (std::size_t k = 0; k < steps.size(); ++k) {
      INFO("step row " << k);
      CHECK(steps[k].rank == all_steps[k].rank);
      CHECK(steps[k].step == all_steps[k].step);
      CHECK(steps[k].start == all_steps[k].start);
      CHECK(steps[k].comm == all_steps[k].comm);
      CHECK(steps[k].exposed_comm == all_steps[k].exposed_comm);
      CHECK(steps[k].peak_allocated == all_steps[k].peak_allocated);
    }
  }
  // The run has what the comparison is meant to cover.
  REQUIRE(whole.ranks.size() == 2);
  CHECK(whole.ranks[0].allocations.list.size() > 20);
  CHECK(whole.ranks[0].counter("cat:unknown") != nullptr);
  CHECK(whole.ranks[0].collectives.front().next_rank == 1);
  bool two_rows = false;
  for (const auto& lane : whole.ranks[0].lanes) two_rows = two_rows || (lane.kind == LaneKind::Kernel && lane.rows.size() > 1);
  CHECK(two_rows);
  // The expandable segment's reservation is marked, though its map came in a later piece.
  CHECK((whole.ranks[0].alloc_events.front().flags & memcomm::prof::kSegmentVirtualRange) != 0);
}

TEST_CASE("an allocator timeline updated as events arrive seeks to the states of one built at once") {
  AllocEvents all;
  std::mt19937 rng(7);
  all.push_back({0, 0x100000, 1 << 20, 0, EventKind::SegmentAlloc});
  std::vector<std::uint64_t> live;
  for (int i = 1; i < 20000; ++i) {
    if (live.empty() || (rng() % 2 && live.size() < 200)) {
      const std::uint64_t addr = 0x100000 + (rng() % 256) * 4096;
      all.push_back({i, addr, 4096, 0, EventKind::Alloc});
      live.push_back(addr);
    } else {
      const std::size_t k = rng() % live.size();
      all.push_back({i, live[k], 4096, 0, EventKind::FreeCompleted});
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  AllocEvents grown;
  AllocatorTimeline inc(&grown, 256);
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t n = std::min(all.size() - at, std::size_t{1} + rng() % 3000);
    const std::size_t before = grown.size();
    grown.append(all.begin() + static_cast<std::ptrdiff_t>(at), all.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
    inc.update(before);
    (void)inc.seek_index(grown.size() / 2);  // a cursor somewhere in the middle between updates
  }
  AllocatorTimeline once(&all, 256);
  CHECK(inc.checkpoint_count() == once.checkpoint_count());
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{777}, std::size_t{12345}, all.size()}) {
    const AllocatorState a = inc.seek_index(n), b = once.seek_index(n);
    CHECK(a.allocated == b.allocated);
    CHECK(a.reserved == b.reserved);
    CHECK(a.block_count == b.block_count);
    CHECK(a.unmatched == b.unmatched);
  }
  // An event changed before the fold restarts it (a late event merged in).
  grown[10].size = 8192;
  grown[10].op = EventKind::Alloc;
  inc.update(10);
  AllocatorTimeline again(&grown, 256);
  CHECK(inc.seek_index(grown.size()).allocated == again.seek_index(grown.size()).allocated);
}
