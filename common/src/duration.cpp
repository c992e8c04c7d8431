#include "memcomm/common/duration.hpp"

#include <cstdio>

namespace memcomm {

std::string format_ms(std::int64_t ns, int decimals, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, static_cast<double>(ns) / 1e6, unit);
  return buf;
}

}  // namespace memcomm
