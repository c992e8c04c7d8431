// TSC calibration for now_ns(); see Note [TSC clock] in clock.hpp.
#include "memcomm/profiler/clock.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace memcomm::prof {
namespace {

#ifdef MEMCOMM_PROF_HAVE_TSC
// A ring of calibrations: a reader that loaded a pointer keeps a valid object even while newer
// ones are published (a reader would need to stall for 63 recalibrations, about a minute, to race).
constexpr int kSlots = 64;
detail::TscCalibration g_slots[kSlots];
int g_next_slot = 0;
std::mutex g_mu;
bool g_inited = false;
bool g_use_tsc = false;
uint64_t g_base_tsc = 0;   // first calibration pair: the baseline grows from here
int64_t g_base_ns = 0;

bool kernel_trusts_tsc() {
  if (const char* env = std::getenv("MEMCOMM_CLOCK")) {
    if (std::strcmp(env, "monotonic") == 0) return false;
  }
  FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (!f) return false;
  char buf[32] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  return ok && std::strncmp(buf, "tsc", 3) == 0;
}

// A (tsc, ns) pair taken as tightly as possible: the ns reading bracketed by two tick readings.
void sample_pair(uint64_t& tsc, int64_t& ns) {
  tsc = 0;
  ns = 0;
  uint64_t best_gap = ~0ull;
  for (int i = 0; i < 5; ++i) {
    const uint64_t a = __rdtsc();
    const int64_t n = monotonic_ns();
    const uint64_t b = __rdtsc();
    if (b - a < best_gap) {
      best_gap = b - a;
      tsc = a + (b - a) / 2;
      ns = n;
    }
  }
}

void publish(uint64_t tsc, int64_t ns, uint64_t mult) {
  detail::TscCalibration& slot = g_slots[g_next_slot];
  g_next_slot = (g_next_slot + 1) % kSlots;
  slot = {tsc, ns, mult};
  detail::g_tsc.store(&slot, std::memory_order_release);
}

uint64_t rate(uint64_t dtsc, int64_t dns) {
  return uint64_t((static_cast<unsigned __int128>(uint64_t(dns)) << 32) / dtsc);
}
#endif

}  // namespace

bool clock_init() {
#ifdef MEMCOMM_PROF_HAVE_TSC
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inited) return g_use_tsc;
  g_inited = true;
  if (!kernel_trusts_tsc()) return false;
  uint64_t t0 = 0, t1 = 0;
  int64_t n0 = 0, n1 = 0;
  sample_pair(t0, n0);
  do {  // spin ~2 ms: enough for a rate good to ~1e-4; recalibration refines it
    sample_pair(t1, n1);
  } while (n1 - n0 < 2'000'000);
  if (t1 <= t0) return false;
  g_base_tsc = t0;
  g_base_ns = n0;
  publish(t1, n1, rate(t1 - t0, n1 - n0));
  g_use_tsc = true;
  return true;
#else
  return false;
#endif
}

void clock_recalibrate() {
#ifdef MEMCOMM_PROF_HAVE_TSC
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_use_tsc) return;
  uint64_t t = 0;
  int64_t n = 0;
  sample_pair(t, n);
  if (t <= g_base_tsc) return;
  const uint64_t mult = rate(t - g_base_tsc, n - g_base_ns);
  // Never step backwards: if the old mapping ran ahead, start the new one where it was.
  const int64_t old_here = now_ns();
  publish(t, n > old_here ? n : old_here, mult);
#endif
}

const char* clock_source() {
  return detail::g_tsc.load(std::memory_order_acquire) ? "tsc" : "monotonic";
}

}  // namespace memcomm::prof
