// The load's work on a second core: a PrefaultPool mapping ChunkedArray chunks ahead (Note
// [Prefaulting on the second core] in viewer/model/prefault.cpp) and build_indexes() running the
// per-rank index jobs on two threads (Note [Parallel indexes] in viewer/model/indexes.cpp). Both
// must give exactly what the one-thread code gives.
#include "memcomm_test.hpp"

#include <memcomm/view/chunked.hpp>
#include <memcomm/view/indexes.hpp>
#include <memcomm/view/prefault.hpp>
#include <memcomm/view/synthetic.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <new>
#include <thread>

using namespace memcomm::view;

namespace {

ChunkedArray<std::int64_t> squares(std::size_t n) {
  ChunkedArray<std::int64_t> a;
  for (std::size_t i = 0; i < n; ++i) a.push_back(static_cast<std::int64_t>(i * i));
  return a;
}

}  // namespace

TEST_CASE("blocks from new_prefaulted are writable with or without a pool", "[unit][viewer]") {
  constexpr std::size_t kBytes = 1u << 20;
  const auto fill_and_check = [](std::size_t bytes) {
    auto* p = static_cast<unsigned char*>(new_prefaulted(bytes));
    REQUIRE(p != nullptr);
    std::memset(p, 0xA5, bytes);
    const bool ok = p[0] == 0xA5 && p[bytes / 2] == 0xA5 && p[bytes - 1] == 0xA5;
    ::operator delete(p);
    return ok;
  };
  CHECK(fill_and_check(kBytes));  // no pool: mapped here
  PrefaultPool pool(64u << 20);
  CHECK(pool.taken() == 0);
  CHECK(fill_and_check(kBytes));  // the pool learns the size from this miss
  if (!pool.active()) return;     // one core: nothing more to check
  // The worker maps blocks of the learnt size; one is eventually handed out ready-made. (A bound
  // on how long that may take would be a timed assertion: 20 s only ends a broken test.)
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (pool.taken() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(fill_and_check(kBytes));
  }
  CHECK(pool.taken() > 0);
  // A second pool while one is active stays inactive (blocks come from the first).
  PrefaultPool second(1u << 20);
  CHECK_FALSE(second.active());
}

TEST_CASE("chunked arrays fill the same whether their chunks come from a pool or not", "[unit][viewer]") {
  constexpr std::size_t n = 5 * ChunkedArray<std::int64_t>::kChunk + 123;
  const auto plain = squares(n);
  PrefaultPool pool(16u << 20);  // less than the arrays need: the rest is mapped by the array itself
  for (int round = 0; round < 3; ++round) {
    const auto pooled = squares(n);
    REQUIRE(pooled.size() == n);
    bool same = true;
    for (std::size_t i = 0; i < n; ++i) same = same && pooled[i] == plain[i];
    CHECK(same);
  }
}

TEST_CASE("build_indexes gives what the one-thread step table and summary and checkpoints give", "[unit][viewer]") {
  for (std::uint32_t ranks : {1u, 3u}) {
    INFO("ranks " << ranks);
    SyntheticOptions so;
    so.events = 200'000;
    so.ranks = ranks;
    const Timeline tl = make_synthetic(so);
    const TimelineIndexes ix = build_indexes(tl);
    const auto steps = step_table(tl);
    REQUIRE(ix.steps.size() == steps.size());
    REQUIRE_FALSE(steps.empty());
    bool same = true;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const StepRow &a = ix.steps[i], &b = steps[i];
      same = same && a.rank == b.rank && a.step == b.step && a.start == b.start && a.end == b.end && a.comm == b.comm &&
             a.exposed_comm == b.exposed_comm && a.data_wait == b.data_wait && a.peak_allocated == b.peak_allocated;
    }
    CHECK(same);
    const Summary s = summarize(tl);
    CHECK(ix.summary.spans == s.spans);
    CHECK(ix.summary.collectives == s.collectives);
    CHECK(ix.summary.alloc_events == s.alloc_events);
    CHECK(ix.summary.peak_allocated == s.peak_allocated);
    CHECK(ix.summary.mean_busbw == s.mean_busbw);
    REQUIRE(ix.alloc.size() == tl.ranks.size());
    for (std::size_t slot = 0; slot < tl.ranks.size(); ++slot) {
      AllocatorTimeline one(&tl.ranks[slot].alloc_events);
      REQUIRE(ix.alloc[slot] != nullptr);
      CHECK(ix.alloc[slot]->checkpoint_count() == one.checkpoint_count());
      const TimeNs mid = tl.begin + (tl.end - tl.begin) / 2;
      const AllocatorState& a = ix.alloc[slot]->seek(mid);
      const AllocatorState& b = one.seek(mid);
      CHECK(a.allocated == b.allocated);
      CHECK(a.reserved == b.reserved);
      CHECK(a.block_count == b.block_count);
    }
  }
}
