#include "memcomm/common/bytes.hpp"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

namespace memcomm {

std::string format_bytes(std::uint64_t bytes, int decimals) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  const int digits = unit >= 2 && decimals < 2 ? 2 : decimals;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f %s", digits, v, kUnits[unit]);
  return buf;
}

std::string format_mib(std::uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::uint64_t whole_bytes(double bytes) {
  if (!(bytes > 0)) return 0;  // negative, zero or NaN
  if (bytes >= 18446744073709551616.0) return UINT64_MAX;  // 2^64
  return static_cast<std::uint64_t>(std::round(bytes));
}

std::uint64_t parse_size(const std::string& text, bool allow_zero) {
  const auto fail = [&text](const std::string& why) -> std::invalid_argument {
    return std::invalid_argument("size '" + text + "' " + why);
  };
  std::size_t k = 0;
  while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
  const std::size_t number_start = k;
  const auto digit_at = [&text](std::size_t i) {
    return i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]));
  };
  while (k < text.size() && (digit_at(k) || text[k] == '.')) ++k;
  if (k == number_start) throw fail("does not start with a number (e.g. 512MiB, 1.5GiB, 2GB)");
  const std::size_t mantissa_end = k;
  // An exponent ("2e9", "1.5E+3KiB"): only an 'e' followed by digits, since no unit starts with 'e'.
  if (k < text.size() && (text[k] == 'e' || text[k] == 'E')) {
    std::size_t e = k + 1;
    if (e < text.size() && (text[e] == '+' || text[e] == '-')) ++e;
    if (digit_at(e)) {
      while (digit_at(e)) ++e;
      k = e;
    }
  }
  const std::string number_text = text.substr(number_start, k - number_start);
  const std::string mantissa = text.substr(number_start, mantissa_end - number_start);
  if (mantissa.find('.') != mantissa.rfind('.') || mantissa == ".") throw fail("has a malformed number");
  const double number = std::strtod(number_text.c_str(), nullptr);  // inf past DBL_MAX: "too large" below
  std::string unit;
  for (; k < text.size(); ++k)
    if (!std::isspace(static_cast<unsigned char>(text[k])))
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[k])));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "tb") scale = 1e12;
  else throw fail("has an unknown unit (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  const double bytes = number * scale;
  if (scale == 1 && std::floor(number) != number) throw fail("has a fraction of a byte");
  if (allow_zero && bytes == 0) return 0;
  if (!(bytes >= 1)) throw fail("must be at least one byte");
  if (bytes > 4611686018427387904.0) throw fail("is too large (at most 4 EiB, 2^62 bytes)");  // bytes.hpp says why
  return static_cast<std::uint64_t>(bytes + 0.5);
}

}  // namespace memcomm
