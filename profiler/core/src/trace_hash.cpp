// trace_hash: a multiply-rotate hash over 8-byte words, four independent lanes so the loop runs at
// memory speed. It only has to catch corruption, not resist adversaries.
#include <cstring>

#include "memcomm/profiler/trace_format.hpp"

namespace memcomm::prof {
namespace {
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t mix(uint64_t acc, uint64_t w) { return rotl(acc + w * kP2, 31) * kP1; }
}  // namespace

uint64_t trace_hash(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t a = seed + kP1 + kP2, b = seed + kP2, c = seed, d = seed - kP1;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a = mix(a, load64(p + i));
    b = mix(b, load64(p + i + 8));
    c = mix(c, load64(p + i + 16));
    d = mix(d, load64(p + i + 24));
  }
  uint64_t h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18) + uint64_t(n);
  for (; i + 8 <= n; i += 8) h = rotl(h ^ mix(0, load64(p + i)), 27) * kP1 + kP3;
  for (; i < n; ++i) h = rotl(h ^ (p[i] * kP3), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

}  // namespace memcomm::prof
