// The profiler's clock: int64 nanoseconds on CLOCK_MONOTONIC, read cheaply.
//
// Note [TSC clock]
// clock_gettime(CLOCK_MONOTONIC) costs 20-30 ns through the vDSO on the machines we measured (30 ns
// on the project's 2-core KVM guest), which alone is over the 10 ns/event budget. Where the
// counter is trustworthy, now_ns() reads it directly (rdtsc on x86-64, cntvct_el0 on arm64) and
// converts with a calibration (anchor tick, anchor ns, ns-per-tick in 32.32 fixed point: one
// multiply and a shift) that maps ticks onto CLOCK_MONOTONIC. Trustworthy means: the kernel's own
// clocksource is that counter ("tsc" / "arch_sys_counter": it checked the counter is synchronized
// across CPUs and watches it), and on x86 the CPU also flags it invariant (constant_tsc and
// nonstop_tsc in /proc/cpuinfo: same rate at every P-state, keeps counting in deep C-states).
// The recorder's collector recalibrates about once a second against a baseline that grows with
// the run, so the rate converges and the mapping tracks NTP slewing; anchors never move backwards,
// so now_ns() stays monotonic. Elsewhere (or with MEMCOMM_CLOCK=monotonic) now_ns() is
// clock_gettime. Either way the trace's timebase stays CLOCK_MONOTONIC in ns: values are directly
// comparable with CLOCK_MONOTONIC readings of other processes on the host (what CUPTI's timestamp
// callback returns, what the allocator's steady_clock stamps, what other ranks record), to within
// the calibration error (a few hundred ns after the first second). Nothing in a trace file is
// ever in ticks.
// Cost (bench_profiler, this VM, AMD EPYC Zen 3): rdtsc is microcoded with a throughput of ~29
// cycles (11.7 ns), so back-to-back records cannot beat ~12 ns with a fresh timestamp; but the
// instruction overlaps with surrounding work, and between real work an event costs ~2.5 ns
// (BM_WorkAndRecord vs BM_WorkOnly), against ~23 ns with clock_gettime.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define MEMCOMM_PROF_HAVE_TSC 1
#elif defined(__aarch64__)
#define MEMCOMM_PROF_HAVE_TSC 1
#endif

namespace memcomm::prof {

inline int64_t monotonic_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

inline int64_t realtime_ns() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

#ifdef MEMCOMM_PROF_HAVE_TSC
// The raw counter (Note [TSC clock]); not ordered against surrounding loads and stores on purpose.
inline uint64_t read_ticks() {
#if defined(__aarch64__)
  uint64_t v;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  return __rdtsc();
#endif
}
#endif

namespace detail {
struct TscCalibration {
  uint64_t tsc0;       // anchor tick
  int64_t ns0;         // CLOCK_MONOTONIC ns at the anchor
  uint64_t mult;       // ns per tick, 32.32 fixed point
};
// Null until the TSC is known to be usable and calibrated; then now_ns() uses it.
inline std::atomic<const TscCalibration*> g_tsc{nullptr};
}  // namespace detail

// Current time, ns on CLOCK_MONOTONIC (Note [TSC clock]). Call clock_init() once to enable the TSC path.
inline int64_t now_ns() {
#ifdef MEMCOMM_PROF_HAVE_TSC
  const detail::TscCalibration* c = detail::g_tsc.load(std::memory_order_acquire);
  if (c) {
    const uint64_t d = read_ticks() - c->tsc0;
    return c->ns0 + int64_t((static_cast<unsigned __int128>(d) * c->mult) >> 32);
  }
#endif
  return monotonic_ns();
}

// Decides TSC vs clock_gettime and does a first calibration (a few ms, once per process).
// Thread-safe; later calls return at once. Returns true when the TSC path is in use.
bool clock_init();
// Refines the TSC calibration (called by the recorder's collector about once a second).
void clock_recalibrate();
// "tsc" or "monotonic": which path now_ns() takes.
const char* clock_source();

// Note [One clock per host]
// Two processes that read CLOCK_MONOTONIC itself read the same clock when they run on the same
// kernel boot and in the same time namespace; their traces then merge with offset 0, and estimating
// an offset from round trips would only add the estimate's noise (a few us). The kernel's boot_id
// names the boot (containers on one host share it, whatever their hostnames), and
// /proc/self/timens_offsets shifts the monotonic clock of a time namespace. Equal ids mean one clock;
// different ids, or 0, mean an offset must be estimated. 0 is also the answer while now_ns() reads
// the TSC (Note [TSC clock]): each process maps the counter with its own calibration, so two of them
// on one host disagree by up to that calibration's error, which the probe measures.
uint64_t clock_domain_id();

}  // namespace memcomm::prof
