// memcomm::percentile (Note [Nearest-rank percentile]), format_ms, format_rough_duration and
// whole_bytes: the shared rules for the tools' measured numbers.
#include <catch2/catch.hpp>

#include <memcomm/common/bytes.hpp>
#include <memcomm/common/duration.hpp>
#include <memcomm/common/percentile.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

TEST_CASE("percentile is the nearest-rank sample: always one that was measured") {
  const std::vector<double> v = {40, 10, 30, 20};  // unsorted on purpose
  CHECK(memcomm::percentile(v, 0.5) == 20);         // lower middle of an even count
  CHECK(memcomm::percentile(v, 0.75) == 30);
  CHECK(memcomm::percentile(v, 0.95) == 40);
  CHECK(memcomm::percentile(v, 1.0) == 40);
  CHECK(memcomm::percentile(v, 0.0) == 10);
  CHECK(memcomm::percentile(v, 0.25) == 10);
  CHECK(memcomm::percentile(v, 0.26) == 20);        // ceil(0.26 x 4) = 2nd smallest
  CHECK(memcomm::percentile(v, -1.0) == 10);        // clamped
  CHECK(memcomm::percentile(v, 7.0) == 40);
  CHECK(memcomm::percentile({}, 0.5) == 0);
  CHECK(memcomm::percentile({5}, 0.95) == 5);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  CHECK(memcomm::percentile_sorted(hundred, 0.95) == 95);
  CHECK(memcomm::percentile_sorted(hundred, 0.5) == 50);
  CHECK(memcomm::percentile_sorted(hundred, 0.951) == 96);
}

TEST_CASE("format_ms prints milliseconds, with or without the unit") {
  CHECK(memcomm::format_ms(12'345'678) == "12.3 ms");
  CHECK(memcomm::format_ms(12'345'678, 3, "") == "12.346");
  CHECK(memcomm::format_ms(0) == "0.0 ms");
  CHECK(memcomm::format_ms(-1'500'000) == "-1.5 ms");
}

TEST_CASE("format_rough_duration rounds to seconds, minutes or hours") {
  CHECK(memcomm::format_rough_duration(43.4) == "43 s");
  CHECK(memcomm::format_rough_duration(720) == "12 min");
  CHECK(memcomm::format_rough_duration(9603383.8) == "2667.6 h");
}

TEST_CASE("whole_bytes rounds a measured double for format_bytes") {
  CHECK(memcomm::whole_bytes(1535.6) == 1536);
  CHECK(memcomm::format_bytes(memcomm::whole_bytes(1535.6)) == "1.5 KiB");
  CHECK(memcomm::whole_bytes(-3.0) == 0);
  CHECK(memcomm::whole_bytes(std::nan("")) == 0);
  CHECK(memcomm::whole_bytes(1e30) == UINT64_MAX);
}
