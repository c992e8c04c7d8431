// Planned mode and the steady state of a fixed-shape training loop.
#include "allocator_test_util.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

namespace {

// toy_training_step, with parameters allocated before the first step, which is marked as an
// iteration of its own.
void training_step(CachingAllocator& a, std::size_t shape, std::vector<void*>& params) {
  if (params.empty()) {
    for (int i = 0; i < 8; ++i) params.push_back(a.allocate((std::size_t(i) + 1) * 3 * MiB + 1000));
    a.step_marker();
  }
  toy_training_step(a, shape);
}

}  // namespace

TEST_CASE("a fixed-shape loop makes no source calls after iteration 2", "[allocator][steady]") {
  for (bool planned : {false, true}) {
    for (bool expandable : {true, false}) {
      AllocatorConfig c;
      c.planned = planned;
      c.expandable_segments = expandable;
      CachingAllocator a(simulated(), c);
      std::vector<void*> params;
      std::int64_t calls_after_2 = 0;
      for (int it = 0; it < 12; ++it) {
        training_step(a, 4, params);
        a.step_marker();
        if (it == 1) calls_after_2 = a.stats().source_calls();
      }
      INFO("planned=" << planned << " expandable=" << expandable);
      CHECK(a.stats().source_calls() == calls_after_2);
      a.check_invariants();
      for (void* p : params) a.deallocate(p);
    }
  }
}

TEST_CASE("planned mode serves iterations from the plan", "[allocator][planned]") {
  AllocatorConfig c;
  c.planned = true;
  CachingAllocator a(simulated(), c);
  std::vector<void*> params;
  training_step(a, 4, params);
  a.step_marker();
  training_step(a, 4, params);
  a.step_marker();
  // Only recorded so far: a plan is packed from an iteration that repeated the one before it
  // (Note [Reordered iterations]), here the second.
  CHECK(a.stats().num_planned_allocs == 0);
  training_step(a, 4, params);
  a.step_marker();
  const std::int64_t served = a.stats().num_planned_allocs;
  CHECK(served > 0);
  training_step(a, 4, params);
  a.step_marker();
  CHECK(a.stats().num_planned_allocs == 2 * served);
  CHECK(a.stats().num_plan_deviations == 0);
  a.check_invariants();
  for (void* p : params) a.deallocate(p);
}

TEST_CASE("planned mode falls back to the caching path when the sequence deviates", "[allocator][planned]") {
  AllocatorConfig c;
  c.planned = true;
  CachingAllocator a(simulated(), c);
  std::vector<void*> params;
  for (int it = 0; it < 3; ++it) {
    training_step(a, 4, params);
    a.step_marker();
  }
  const std::int64_t before = a.stats().num_planned_allocs;
  REQUIRE(before > 0);
  // A different shape: the first allocation already deviates; everything is served anyway.
  training_step(a, 5, params);
  a.check_invariants();
  a.step_marker();
  CHECK(a.stats().num_plan_deviations == 1);
  // The failed plan is dropped; once the new shape has repeated, a plan is packed from it and followed.
  training_step(a, 5, params);
  a.step_marker();
  CHECK(a.stats().num_plan_deviations == 1);
  CHECK(a.stats().num_planned_allocs == before);
  training_step(a, 5, params);
  a.step_marker();
  CHECK(a.stats().num_plan_deviations == 1);
  CHECK(a.stats().num_planned_allocs > before);
  a.check_invariants();
}

TEST_CASE("a planned block freed late makes the next iteration leave the plan, safely", "[allocator][planned]") {
  AllocatorConfig c;
  c.planned = true;
  CachingAllocator a(simulated(), c);
  auto iteration = [&](bool keep_first) -> void* {
    void* x = a.allocate(8 * MiB);
    void* y = a.allocate(8 * MiB);
    a.deallocate(y);
    void* z = a.allocate(8 * MiB);
    a.deallocate(z);
    void* w = a.allocate(4 * MiB);
    a.deallocate(w);
    if (keep_first) return x;
    a.deallocate(x);
    return nullptr;
  };
  for (int it = 0; it < 3; ++it) {  // recorded twice (a repeated iteration), then served
    iteration(false);
    a.step_marker();
  }
  REQUIRE(a.stats().num_planned_allocs > 0);
  void* kept = iteration(true);  // x outlives its iteration
  a.step_marker();
  // Next iteration: the plan puts x where the kept block still is; the allocator must not hand it out.
  void* x2 = a.allocate(8 * MiB);
  CHECK(addr(x2) != addr(kept));
  a.check_invariants();
  a.deallocate(x2);
  a.deallocate(kept);
  a.check_invariants();
}

TEST_CASE("planned mode keeps reserved memory near peak live", "[allocator][planned]") {
  AllocatorConfig c;
  c.planned = true;
  CachingAllocator a(simulated(), c);
  std::vector<void*> params;
  for (int it = 0; it < 6; ++it) {
    training_step(a, 4, params);
    a.step_marker();
  }
  const DeviceStats s = a.stats();
  CHECK(double(s.reserved_bytes.peak) <= 1.10 * double(s.allocated_bytes.peak));
}

// Note [Trimming after a followed plan]: once iterations follow the plan, the cache gives back the
// pages the arena made redundant, so the steady state holds arena + what outlives an iteration.
TEST_CASE("after iterations that follow the plan, reserved memory comes down to near peak live",
          "[allocator][planned]") {
  AllocatorConfig c;
  c.planned = true;
  CachingAllocator a(simulated(), c);
  std::vector<void*> params;
  std::int64_t calls = 0;
  for (int it = 0; it < 10; ++it) {
    training_step(a, 4, params);
    a.step_marker();
    if (it == 2) {
      a.reset_peak_stats();
      calls = a.stats().source_calls();
    }
  }
  const DeviceStats s = a.stats();
  const MemorySummary m = a.memory_summary();
  CHECK(s.source_calls() == calls);  // the steady state makes no source calls
  CHECK(s.num_planned_allocs > 0);
  CHECK(m.planned_iteration_allocs > 0);
  CHECK(m.planned_in_arena > 0);
  // What outlives an iteration here is the parameters; the rest is the arena. Without the trim the
  // cache would keep the pages of the learning iterations beside the arena.
  std::size_t param_bytes = 0;
  for (void* p : params) param_bytes += a.block_size(p);
  CHECK(std::size_t(s.reserved_bytes.peak) <= m.planned_arena_bytes + param_bytes + 2 * 2 * MiB);
  CHECK(double(s.reserved_bytes.peak) <= 1.03 * double(s.requested_bytes.peak));
  for (void* p : params) a.deallocate(p);
  a.check_invariants();
}

// Note [Reordered iterations]: an allocation the plan packed outside the arena outlives its iteration,
// so when the cache has no free block for it the cache grows; it never takes a free gap of the arena,
// where it would pin the arena's pages and sit on the ranges planned for the next iterations.
TEST_CASE("an allocation the plan keeps outside the arena never lands in an arena gap", "[allocator][planned]") {
  AllocatorConfig c;
  c.planned = true;
  CachingAllocator a(simulated(), c);
  std::vector<void*> kept;  // one 3 MiB block per iteration that outlives it (saved state)
  auto in_arena = [&](const void* p) {
    for (const SegmentInfo& s : a.snapshot())
      if (s.planned && addr(p) >= s.base && addr(p) < s.base + s.size) return true;
    return false;
  };
  std::int64_t planned_before = 0;
  for (int it = 0; it < 12; ++it) {
    if (it == 4) planned_before = a.stats().num_planned_allocs;
    void* t = a.allocate(8 * MiB);
    void* u = a.allocate(8 * MiB);
    a.deallocate(t);
    void* v = a.allocate(4 * MiB);
    a.deallocate(u);
    a.deallocate(v);  // the arena is free from here to the end of the iteration
    kept.push_back(a.allocate(3 * MiB));
    INFO("iteration " << it);
    CHECK_FALSE(in_arena(kept.back()));
    a.step_marker();
  }
  CHECK(a.stats().num_planned_allocs > planned_before);  // the temporaries still follow the plan
  a.check_invariants();
  for (void* p : kept) a.deallocate(p);
  a.check_invariants();
}
