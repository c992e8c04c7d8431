// See Note [Counter LOD]: per-pixel min/max from the levels against a brute-force pass.
#include "memcomm_test.hpp"

#include <memcomm/view/counter_lod.hpp>

#include <algorithm>
#include <cmath>
#include <random>

using memcomm::view::CounterSeries;
using memcomm::view::PixelMinMax;

namespace {

CounterSeries random_series(std::size_t n, unsigned seed) {
  CounterSeries s("allocated", "B");
  std::mt19937 rng(seed);
  std::int64_t t = 1000;
  double v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    t += 1 + static_cast<std::int64_t>(rng() % 50);
    v = std::max(0.0, v + static_cast<double>(static_cast<int>(rng() % 2001) - 1000));
    if (rng() % 5000 == 0) v += 1e6;  // rare spikes that plain decimation would lose
    s.add(t, v);
  }
  s.build_levels();
  return s;
}

// Envelope of the step function over [a, b): samples inside plus the value in force at a.
bool brute(const CounterSeries& s, std::int64_t a, std::int64_t b, double& mn, double& mx) {
  bool any = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool in = s.time(i) >= a && s.time(i) < b;
    const bool carry = s.time(i) < a && (i + 1 == s.size() || s.time(i + 1) >= a);
    if (!in && !carry) continue;
    mn = any ? std::min(mn, s.value(i)) : s.value(i);
    mx = any ? std::max(mx, s.value(i)) : s.value(i);
    any = true;
  }
  return any;
}

}  // namespace

TEST_CASE("counter LOD levels keep every extreme at any zoom", "[unit][viewer]") {
  const CounterSeries s = random_series(200'000, 7);
  REQUIRE(s.level_count() >= 5);
  const std::int64_t first = s.time(0), last = s.time(s.size() - 1);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t a = first + static_cast<std::int64_t>(rng() % static_cast<unsigned>(last - first));
    const std::int64_t w = 1 + static_cast<std::int64_t>(rng() % static_cast<unsigned>(last - first));
    const std::int64_t b = a + w;
    const int pixels = 50 + static_cast<int>(rng() % 1500);
    std::vector<PixelMinMax> cols;
    s.query(a, b, pixels, cols);
    REQUIRE(cols.size() == static_cast<std::size_t>(pixels));
    double bmn = 0, bmx = 0;
    REQUIRE(brute(s, a, b, bmn, bmx));
    double qmn = INFINITY, qmx = -INFINITY;
    for (const auto& c : cols)
      if (c.valid) qmn = std::min(qmn, c.min), qmx = std::max(qmx, c.max);
    INFO("range " << a << ".." << b << " pixels " << pixels);
    CHECK(qmn == bmn);
    CHECK(qmx == bmx);
    // Each column holds at least its own envelope (levels may widen, never narrow, a column).
    const double ns_per_px = static_cast<double>(w) / pixels;
    for (int c = 0; c < pixels; c += 37) {
      const auto ca = a + static_cast<std::int64_t>(std::ceil(c * ns_per_px));
      const auto cb = a + static_cast<std::int64_t>(std::ceil((c + 1) * ns_per_px));
      double mn = 0, mx = 0;
      if (cb <= ca || !brute(s, ca, cb, mn, mx)) continue;
      CHECK(cols[static_cast<std::size_t>(c)].min <= mn);
      CHECK(cols[static_cast<std::size_t>(c)].max >= mx);
    }
  }
}

TEST_CASE("counter query at full resolution is exact per column and carries values", "[unit][viewer]") {
  CounterSeries s("reserved", "B");
  // Steps: 10 at t=100, 30 at 200, 20 at 205, 5 at 400.
  s.add(100, 10);
  s.add(200, 30);
  s.add(205, 20);
  s.add(400, 5);
  s.build_levels();
  std::vector<PixelMinMax> cols;
  s.query(0, 500, 5, cols);  // 100 ns per column
  CHECK_FALSE(cols[0].valid);                              // before the first sample
  CHECK((cols[1].valid && cols[1].min == 10 && cols[1].max == 10));
  CHECK((cols[2].min == 10 && cols[2].max == 30));         // 30 and 20 inside, 10 carried in
  CHECK((cols[3].min == 20 && cols[3].max == 20));         // no sample: the value in force
  CHECK((cols[4].min == 5 && cols[4].max == 20));
  double v = 0;
  CHECK(s.value_at(300, v));
  CHECK(v == 20);
  CHECK_FALSE(s.value_at(50, v));
  double mn = 0, mx = 0;
  CHECK(s.range_min_max(150, 210, mn, mx));
  CHECK(mn == 10);
  CHECK(mx == 30);
  CHECK(s.global_max() == 30);
}

TEST_CASE("range_min_max over the levels is exact at any range width", "[unit][viewer]") {
  // 200 k samples span several chunks of the sample arrays and five LOD levels; ranges from a few
  // samples to all of them are answered from aligned buckets and must match the brute-force envelope.
  const CounterSeries s = random_series(200'000, 11);
  const std::int64_t first = s.time(0), last = s.time(s.size() - 1);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const auto span = static_cast<unsigned>(last - first);
    const std::int64_t a = first - 100 + static_cast<std::int64_t>(rng() % span);
    const std::int64_t w = static_cast<std::int64_t>(trial % 2 ? rng() % 500 : rng() % span);
    double mn = 0, mx = 0, bmn = 0, bmx = 0;
    const bool got = s.range_min_max(a, a + w, mn, mx);
    INFO("range " << a << ".." << a + w);
    REQUIRE(got == brute(s, a, a + w + 1, bmn, bmx));  // range_min_max's end is inclusive
    if (!got) continue;
    CHECK(mn == bmn);
    CHECK(mx == bmx);
  }
  double mn = 0, mx = 0;
  CHECK_FALSE(s.range_min_max(first - 10, first - 1, mn, mx));  // before the first sample
  CHECK_FALSE(s.range_min_max(first + 10, first, mn, mx));      // empty range
}

TEST_CASE("a coarse bucket that spans a gap with no samples draws the value held across it", "[unit][viewer]") {
  // A curve that swings 0..70 for 5003 samples, holds 0 over a long gap, then swings again: the
  // bucket holding the last samples before the gap and the first after it spans the gap, and its
  // 0..70 spread over every column it covered drew a full-height bar where the curve is 0.
  CounterSeries s("active", "B");
  for (std::int64_t i = 0; i < 5003; ++i) s.add(i, static_cast<double>((i % 2) * 70));  // ends at 0
  for (std::int64_t i = 0; i < 5000; ++i) s.add(100'000 + i, static_cast<double>(((i + 1) % 2) * 70));
  s.build_levels();
  REQUIRE(s.level_count() >= 3);
  std::vector<PixelMinMax> cols;
  s.query(0, 110'000, 110, cols);  // 1000 ns per column: coarse levels, columns with whole ns edges
  for (int c = 0; c < 110; ++c) {
    INFO("column " << c);
    double mn = 0, mx = 0;
    REQUIRE(brute(s, c * 1000, (c + 1) * 1000, mn, mx));
    REQUIRE(cols[static_cast<std::size_t>(c)].valid);
    CHECK(cols[static_cast<std::size_t>(c)].min == mn);  // exact per column, not a superset
    CHECK(cols[static_cast<std::size_t>(c)].max == mx);
    if (c >= 6 && c < 100) CHECK(cols[static_cast<std::size_t>(c)].max == 0);  // the gap
  }
}
