// TSC calibration for now_ns(); see Note [TSC clock] in clock.hpp.
#include "memcomm/trace/clock.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <string>

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

std::string read_small_file(const char* path, size_t limit) {
  std::string out;
  FILE* f = std::fopen(path, "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while (out.size() < limit && (n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

bool has_word(const std::string& text, const char* word) {
  const size_t len = std::strlen(word);
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool starts = at == 0 || text[at - 1] == ' ' || text[at - 1] == '\t';
    const bool ends = at + len == text.size() || text[at + len] == ' ' || text[at + len] == '\n';
    if (starts && ends) return true;
  }
  return false;
}

// See Note [TSC clock]: the kernel's clocksource must be the counter, and on x86 the CPU must call
// the TSC invariant.
bool counter_trusted() {
  if (const char* env = std::getenv("MEMCOMM_CLOCK")) {
    if (std::strcmp(env, "monotonic") == 0) return false;
  }
  const std::string source =
      read_small_file("/sys/devices/system/clocksource/clocksource0/current_clocksource", 64);
#if defined(__aarch64__)
  return source.rfind("arch_sys_counter", 0) == 0;
#else
  if (source.rfind("tsc", 0) != 0) return false;
  // The first "flags" line is enough: every CPU of a machine reports the same TSC features.
  const std::string cpuinfo = read_small_file("/proc/cpuinfo", 1 << 16);
  const size_t flags = cpuinfo.find("\nflags");
  if (flags == std::string::npos) return false;
  const std::string line = cpuinfo.substr(flags + 1, cpuinfo.find('\n', flags + 1) - flags - 1);
  return has_word(line, "constant_tsc") && has_word(line, "nonstop_tsc");
#endif
}

// A (tsc, ns) pair taken as tightly as possible: the ns reading bracketed by two tick readings.
void sample_pair(uint64_t& tsc, int64_t& ns) {
  tsc = 0;
  ns = 0;
  uint64_t best_gap = ~0ull;
  for (int i = 0; i < 5; ++i) {
    const uint64_t a = read_ticks();
    const int64_t n = monotonic_ns();
    const uint64_t b = read_ticks();
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
  if (!counter_trusted()) return false;
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

uint64_t clock_domain_id() {
  // A TSC-mapped clock is this process's own calibration of the counter onto CLOCK_MONOTONIC:
  // another process's differs by its calibration error (us), which only a probe measures.
  if (clock_init()) return 0;
  const auto slurp = [](const char* path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  const std::string boot = slurp("/proc/sys/kernel/random/boot_id");
  if (boot.empty()) return 0;
  // Absent before Linux 5.6 (no time namespaces, so nothing shifts the clock).
  const std::string offsets = slurp("/proc/self/timens_offsets");
  const uint64_t id = std::hash<std::string>{}(boot + '\n' + offsets);
  return id == 0 ? 1 : id;
}

}  // namespace memcomm::prof
