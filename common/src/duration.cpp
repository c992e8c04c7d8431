#include "memcomm/common/duration.hpp"

#include <cstdio>

namespace memcomm {

std::string format_ms(std::int64_t ns, int decimals, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, static_cast<double>(ns) / 1e6, unit);
  return buf;
}

std::string format_rough_duration(double seconds) {
  char buf[64];
  if (seconds < 120) std::snprintf(buf, sizeof buf, "%.0f s", seconds);
  else if (seconds < 7200) std::snprintf(buf, sizeof buf, "%.0f min", seconds / 60);
  else std::snprintf(buf, sizeof buf, "%.1f h", seconds / 3600);
  return buf;
}

}  // namespace memcomm
