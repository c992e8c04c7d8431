// The PyTorch CUDACachingAllocator simulation on small scenarios whose outcome PyTorch's rules fix.
#include "memcomm/replay/pytorch_sim.hpp"
#include "memcomm_test.hpp"

namespace rp = memcomm::replay;

using memcomm::test::MiB;

namespace {

std::unique_ptr<rp::Policy> sim(std::uint64_t capacity = 0, bool expandable = false) {
  rp::PyTorchSimConfig cfg;
  cfg.capacity = capacity;
  cfg.expandable_segments = expandable;
  return rp::make_pytorch_sim(cfg);
}
}  // namespace

TEST_CASE("pytorch sim: small requests round to 512 B and share 2 MiB segments", "[pytorch]") {
  auto p = sim();
  auto a = p->allocate(1, 0), b = p->allocate(1000, 0), c = p->allocate(1 * MiB, 0);
  REQUIRE((a && b && c));
  CHECK(*b - *a == 512);
  CHECK(*c - *b == 1024);
  auto s = p->stats();
  CHECK(s.source_allocs == 1);
  CHECK(s.reserved == 2 * MiB);
  CHECK(s.allocated == 512 + 1024 + MiB);
  p->free(*b);
  p->free(*a);  // merges with b's block
  p->check_invariants();
  auto d = p->allocate(1536, 0);
  CHECK(*d == *a);  // best fit takes the merged 1.5 KiB hole
  p->check_invariants();
}

TEST_CASE("pytorch sim: segment sizes and the large-pool split rule", "[pytorch]") {
  auto p = sim();
  p->allocate(5 * MiB, 0);  // 1-10 MiB: a 20 MiB segment, split (15 MiB left > 1 MiB)
  CHECK(p->stats().reserved == 20 * MiB);
  p->allocate(14 * MiB + 512 * 1024, 0);  // fits the 15 MiB remainder; 0.5 MiB left <= 1 MiB: not split
  CHECK(p->stats().reserved == 20 * MiB);
  CHECK(p->stats().allocated == 20 * MiB);  // the whole remainder went to the request
  p->allocate(12 * MiB + 1, 0);  // >= 10 MiB: own segment rounded up to 2 MiB
  CHECK(p->stats().reserved == 20 * MiB + 14 * MiB);
  CHECK(p->stats().source_allocs == 2);
  p->check_invariants();
}

TEST_CASE("pytorch sim: no reuse across streams", "[pytorch]") {
  auto p = sim();
  auto a = p->allocate(4096, 1);
  p->free(*a);
  auto b = p->allocate(4096, 2);
  CHECK(p->stats().source_allocs == 2);  // stream 2 cannot take stream 1's cached segment
  auto c = p->allocate(4096, 1);
  CHECK(*c == *a);
  CHECK(*b != *a);
}

TEST_CASE("pytorch sim: under a cap it frees the cache and retries, then reports OOM", "[pytorch]") {
  auto p = sim(70 * MiB);
  auto a = p->allocate(30 * MiB, 0);
  auto b = p->allocate(30 * MiB, 0);
  REQUIRE((a && b));
  p->free(*a);
  auto c = p->allocate(40 * MiB, 0);  // cache miss; 60 + 40 > 70: release a's segment, retry
  REQUIRE(c);
  auto s = p->stats();
  CHECK(s.retries == 1);
  CHECK(s.source_frees == 1);
  CHECK(s.reserved == 70 * MiB);  // b (30) + c (40)
  CHECK_FALSE(p->allocate(40 * MiB, 0));          // nothing left to free
  p->check_invariants();
}

TEST_CASE("pytorch sim: expandable segments map 20 MiB pages and grow in place", "[pytorch][expandable]") {
  auto p = sim(0, true);
  auto a = p->allocate(5 * MiB, 0);
  CHECK(p->stats().reserved == 20 * MiB);
  auto b = p->allocate(10 * MiB, 0);  // fits the mapped remainder
  CHECK(*b == *a + 5 * MiB);
  CHECK(p->stats().source_allocs == 1);
  auto c = p->allocate(10 * MiB, 0);  // 5 MiB free at the end + one more page, contiguous
  CHECK(*c == *b + 10 * MiB);
  CHECK(p->stats().reserved == 40 * MiB);
  CHECK(p->stats().source_allocs == 2);
  auto small = p->allocate(1000, 0);  // small pool: its own range, 2 MiB pages
  REQUIRE(small);
  CHECK(p->stats().reserved == 42 * MiB);
  p->check_invariants();
  p->free(*a);
  p->free(*b);
  p->free(*c);
  p->check_invariants();
}

TEST_CASE("pytorch sim: expandable segments unmap free pages when the cap is hit", "[pytorch][expandable]") {
  auto p = sim(60 * MiB, true);
  auto a = p->allocate(40 * MiB, 0);
  auto b = p->allocate(20 * MiB, 0);
  REQUIRE((a && b));
  p->free(*a);
  auto c = p->allocate(50 * MiB, 0);  // needs pages: unmap a's 40 MiB, then map 40 + 20... fits 60
  REQUIRE_FALSE(c);  // b sits at 40-60 MiB; 50 MiB contiguous needs [60, 110) mapped: 20 + 50 > 60
  CHECK(p->stats().source_frees >= 1);
  auto d = p->allocate(40 * MiB, 0);  // the unmapped hole before b fits exactly
  REQUIRE(d);
  CHECK(*d == *a);
  p->check_invariants();
}

TEST_CASE("pytorch sim: max_split_size oversize rules", "[pytorch]") {
  rp::PyTorchSimConfig cfg;
  cfg.max_split_size = 40 * MiB;
  auto p = rp::make_pytorch_sim(cfg);
  auto big = p->allocate(50 * MiB, 0);
  p->free(*big);
  auto small = p->allocate(10 * MiB, 0);  // below max_split: may not take the 50 MiB oversize block
  CHECK(*small != *big);
  CHECK(p->stats().source_allocs == 2);
  auto a = p->allocate(45 * MiB, 0);  // oversize: takes the cached 50 MiB block (waste < 20 MiB), unsplit
  CHECK(*a == *big);
  CHECK(p->stats().allocated == 10 * MiB + 50 * MiB);  // 10 MiB got its own 10 MiB segment
  p->free(*a);
  auto b = p->allocate(41 * MiB, 0);  // 50 < 41 + 20 MiB of waste: taken too
  CHECK(*b == *big);
  p->free(*b);
  auto c = p->allocate(28 * MiB, 0);  // below max_split: new segment even though 50 MiB is cached
  CHECK(*c != *big);
  CHECK(p->stats().source_allocs == 3);
  p->check_invariants();
}
