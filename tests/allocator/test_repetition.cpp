// Planned mode without step markers: the period of the request sequence is detected online
// (Note [Detected repetition] in allocator/core/repetition.cpp).
#include <random>
#include <thread>

#include "allocator_test_util.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

namespace {


constexpr std::int64_t kAllocsPerStep = 12 * 2 + 12;

AllocatorConfig planned_config() {
  AllocatorConfig c;
  c.planned = true;
  return c;
}

}  // namespace

TEST_CASE("planned mode detects the iteration without step markers", "[allocator][planned][repetition]") {
  CachingAllocator a(simulated(), planned_config());
  std::vector<void*> params;
  for (int i = 0; i < 4; ++i) params.push_back(a.allocate((std::size_t(i) + 1) * 3 * MiB));
  std::vector<std::int64_t> planned_per_step;
  std::int64_t calls_at_6 = 0;
  for (int it = 0; it < 10; ++it) {
    const std::int64_t before = a.stats().num_planned_allocs;
    toy_training_step(a, 4);
    planned_per_step.push_back(a.stats().num_planned_allocs - before);
    if (it == 5) calls_at_6 = a.stats().source_calls();
    a.check_invariants();
  }
  INFO("planned allocations per step: " << planned_per_step[0] << ", ..., " << planned_per_step.back());
  CHECK(planned_per_step[0] == 0);  // nothing is known yet: online only
  CHECK(planned_per_step[1] == 0);
  // Once detected, whole iterations are served from the plan: the layer period (every 8 allocations)
  // was not taken for the iteration, else every step would leave the plan.
  CHECK(planned_per_step.back() == kAllocsPerStep);
  CHECK(planned_per_step[8] == kAllocsPerStep);
  CHECK(a.stats().num_plan_deviations == 0);
  CHECK(a.stats().source_calls() == calls_at_6);  // steady state: no source calls
  const DeviceStats s = a.stats();
  CHECK(double(s.reserved_bytes.peak) <= 1.10 * double(s.allocated_bytes.peak));
  for (void* p : params) a.deallocate(p);
  a.check_invariants();
}

TEST_CASE("a detected plan falls back to the caching path when the sequence deviates",
          "[allocator][planned][repetition]") {
  CachingAllocator a(simulated(), planned_config());
  for (int it = 0; it < 8; ++it) toy_training_step(a, 4);
  const std::int64_t served = a.stats().num_planned_allocs;
  REQUIRE(served > 0);
  REQUIRE(a.stats().num_plan_deviations == 0);
  // Another shape: the first allocation already leaves the plan; every request is served anyway.
  const std::int64_t planned_before = a.stats().num_planned_allocs;
  toy_training_step(a, 5);
  a.check_invariants();
  CHECK(a.stats().num_plan_deviations == 1);
  CHECK(a.stats().num_planned_allocs == planned_before);
  CHECK(a.stats().num_ooms == 0);
  // The new shape repeats: after enough periods (more than before, since a plan was missed) it is
  // planned again, and followed.
  for (int it = 0; it < 10; ++it) toy_training_step(a, 5);
  a.check_invariants();
  const std::int64_t before = a.stats().num_planned_allocs;
  toy_training_step(a, 5);
  CHECK(a.stats().num_planned_allocs - before == kAllocsPerStep);
  CHECK(a.stats().num_plan_deviations == 1);
  CHECK(a.stats().allocation.current == 0);
}

TEST_CASE("a detected plan survives a block that outlives its iteration", "[allocator][planned][repetition]") {
  CachingAllocator a(simulated(), planned_config());
  for (int it = 0; it < 8; ++it) toy_training_step(a, 3);
  REQUIRE(a.stats().num_planned_allocs > 0);
  // Keep one planned block alive across the boundary: the next iteration's plan wants its range.
  void* kept = a.allocate(3 * MiB + 777);  // the first allocation of an iteration, planned
  void* t = a.allocate(3 * 300 * KiB + 13);
  a.deallocate(t);
  for (int it = 0; it < 3; ++it) toy_training_step(a, 3);  // the sequence is off by two allocations
  a.check_invariants();
  CHECK(a.stats().num_ooms == 0);
  CHECK(a.stats().allocation.current == 1);
  a.deallocate(kept);
  a.check_invariants();
}

TEST_CASE("detection plans nothing for a sequence that does not repeat", "[allocator][planned][repetition]") {
  CachingAllocator a(simulated(), planned_config());
  std::mt19937_64 rng(7);
  std::vector<void*> live;
  for (int i = 0; i < 20000; ++i) {
    if (live.empty() || rng() % 2) {
      live.push_back(a.allocate(std::size_t(rng() % (4 * MiB)) + 1));
    } else {
      const std::size_t k = std::size_t(rng() % live.size());
      a.deallocate(live[k]);
      live[k] = live.back();
      live.pop_back();
    }
  }
  a.check_invariants();
  CHECK(a.stats().num_planned_allocs == 0);
  CHECK(a.stats().num_plan_deviations == 0);
  for (void* p : live) a.deallocate(p);
}

TEST_CASE("step markers switch detection off, and detection can be turned off", "[allocator][planned][repetition]") {
  for (bool detect : {true, false}) {
    AllocatorConfig c = planned_config();
    c.detect_repetition = detect;
    CachingAllocator a(simulated(), c);
    for (int it = 0; it < 8; ++it) toy_training_step(a, 4);
    INFO("detect_repetition=" << detect);
    CHECK((a.stats().num_planned_allocs > 0) == detect);
  }
  // With markers, iterations are what the markers say, even when detection found something else.
  CachingAllocator a(simulated(), planned_config());
  for (int it = 0; it < 8; ++it) toy_training_step(a, 4);
  for (int it = 0; it < 4; ++it) {
    toy_training_step(a, 4);
    toy_training_step(a, 4);
    a.step_marker();  // an "iteration" of two steps
  }
  const std::int64_t before = a.stats().num_planned_allocs;
  toy_training_step(a, 4);
  toy_training_step(a, 4);
  a.step_marker();
  CHECK(a.stats().num_planned_allocs - before == 2 * kAllocsPerStep);
  a.check_invariants();
}

TEST_CASE("detection and planned serving are safe with several threads", "[allocator][planned][repetition]") {
  CachingAllocator a(simulated(), planned_config());
  for (int it = 0; it < 6; ++it) toy_training_step(a, 2);  // a plan exists before the threads start
  REQUIRE(a.stats().num_planned_allocs > 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&a, t] {
      for (int it = 0; it < 20; ++it) toy_training_step(a, std::size_t(1 + (t + it) % 2));
    });
  for (std::thread& th : threads) th.join();
  a.check_invariants();
  CHECK(a.stats().allocation.current == 0);
  CHECK(a.stats().num_ooms == 0);
}

TEST_CASE("a long unmarked history does not become the first marked iteration", "[allocator][planned][repetition]") {
  AllocatorConfig c = planned_config();
  c.max_plan_period = 64;  // history is trimmed to a few hundred allocations
  CachingAllocator a(simulated(), c);
  for (int it = 0; it < 40; ++it) toy_training_step(a, 1);
  a.step_marker();  // the first marker: nothing before it is planned as an iteration
  const std::int64_t before = a.stats().num_planned_allocs;
  toy_training_step(a, 2);
  CHECK(a.stats().num_planned_allocs == before);
  a.step_marker();
  toy_training_step(a, 2);  // repeats the first marked iteration: planned from here
  a.step_marker();
  CHECK(a.stats().num_planned_allocs == before);
  toy_training_step(a, 2);
  a.step_marker();
  CHECK(a.stats().num_planned_allocs - before == kAllocsPerStep);
  a.check_invariants();
}
