// memcomm::format_bytes, format_mib and parse_size: what every tool prints and accepts.
#include <catch2/catch.hpp>

#include <memcomm/common/bytes.hpp>

#include <stdexcept>
#include <string>

using memcomm::format_bytes;
using memcomm::format_mib;
using memcomm::parse_size;

TEST_CASE("sizes print in binary units, tenths below a GiB and hundredths from a GiB") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(20u << 20) == "20.0 MiB");
  CHECK(format_bytes(20u << 20, 2) == "20.00 MiB");
  CHECK(format_bytes(3ull << 29) == "1.50 GiB");
  CHECK(format_bytes(5ull << 40) == "5.00 TiB");
}

TEST_CASE("a MiB column keeps its unit whatever the size") {
  CHECK(format_mib(0) == "0.0");
  CHECK(format_mib(3u << 19) == "1.5");
  CHECK(format_mib(5ull << 30) == "5120.0");
}

TEST_CASE("sizes parse with binary and decimal units and fractions") {
  CHECK(parse_size("4096") == 4096);
  CHECK(parse_size("4096B") == 4096);
  CHECK(parse_size("512KiB") == 512 * 1024);
  CHECK(parse_size("512k") == 512 * 1024);
  CHECK(parse_size("1.5GiB") == 3ull << 29);
  CHECK(parse_size("20.5MiB") == 41ull << 19);
  CHECK(parse_size("2GB") == 2000000000ull);
  CHECK(parse_size("64 mib") == 64ull << 20);
  CHECK(parse_size("1TB") == 1000000000000ull);
  CHECK(parse_size("0 MiB", /*allow_zero=*/true) == 0);  // a limit of zero: none
}

TEST_CASE("sizes take a decimal exponent, as the tools' help writes them (2GB = 2e9 bytes)") {
  CHECK(parse_size("2e9") == 2000000000ull);
  CHECK(parse_size("2E9") == 2000000000ull);
  CHECK(parse_size("1.5e3") == 1500);
  CHECK(parse_size("1e+3KiB") == 1000ull * 1024);
  CHECK(parse_size("2e3 b") == 2000);
  CHECK(parse_size("4e-3KiB") == 4);  // 4.096 bytes rounds to 4
}

namespace {
// Why parse_size refuses `text`, or "accepted".
std::string reason(const std::string& text) {
  try {
    parse_size(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}
}  // namespace

TEST_CASE("sizes out of range say so, not 'unknown unit'") {
  // At most 2^62 bytes: page rounding near 2^64 overflowed (memcomm-replay --capacity 9223372036854775807).
  CHECK(parse_size("4611686018427387904") == 4611686018427387904ull);
  for (const char* big : {"1e400", "2e19", "2e7TiB", "1e30 GB", "9223372036854775807", "18446744073709551615"}) {
    INFO(big);
    CHECK(reason(big).find("too large") != std::string::npos);
    CHECK(reason(big).find(big) != std::string::npos);
  }
  CHECK(reason("1e-400").find("at least one byte") != std::string::npos);
  CHECK(reason("2e-1").find("fraction of a byte") != std::string::npos);
  CHECK(reason("2eMiB").find("unknown unit") != std::string::npos);  // 'e' without digits is no exponent
  CHECK(reason("1.2.3e4").find("malformed") != std::string::npos);
}

TEST_CASE("bad sizes are rejected with the text and the reason") {
  CHECK(reason("").find("does not start with a number") != std::string::npos);
  CHECK(reason("GiB").find("'GiB'") != std::string::npos);
  CHECK(reason("12 parsecs").find("unknown unit") != std::string::npos);
  CHECK(reason("1.2.3MiB").find("malformed") != std::string::npos);
  CHECK(reason("0.5").find("fraction of a byte") != std::string::npos);
  CHECK(reason("0MiB").find("at least one byte") != std::string::npos);
  CHECK(reason("99999999TiB").find("too large") != std::string::npos);
}
