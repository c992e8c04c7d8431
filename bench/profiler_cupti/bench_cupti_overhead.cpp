// CUPTI overhead on a GPU step, four ways in one run (same binary, same process):
//   off        - CUPTI never started (recorder on, host events only)
//   on         - CuptiCapture running (all kinds of cupti_capture.hpp)
//   no-phases  - the same without phase attribution (CuptiOptions::phase_correlation off: no
//                RUNTIME, DRIVER or EXTERNAL_CORRELATION records; Note [Phase attribution])
//   after      - the capture stopped again (cuptiFinalize'd): should cost nothing
// Each step is a Step phase (a recorder range and, through the NVTX bridge, an NVTX range).
// "on", "no-phases" and "after" alternate over rounds so drift (clocks, thermals) hits all alike. Each figure is
// the median step time over all rounds. Usage: bench_cupti_overhead [rounds] [steps_per_round] [kernels_per_step]
#include <cuda_runtime.h>  // not _api.h: the typed cudaMalloc(T**) overloads

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "memcomm/trace/clock.hpp"
#include "memcomm/profiler/cupti_capture.hpp"
#include "memcomm/profiler/nvtx_bridge.hpp"
#include "memcomm/profiler/recorder.hpp"
#include "memcomm/profiler/sink.hpp"
#include "step_kernels.hpp"

using namespace memcomm::prof;
using memcomm::bench::run_step;

namespace {

// Counts what reaches the sink; keeps no memory growing with the run.
class CountingSink : public Sink {
 public:
  void consume(const Batch& b) override { events.fetch_add(b.n_events, std::memory_order_relaxed); }
  std::atomic<uint64_t> events{0};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 10;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  const int kernels = argc > 3 ? std::atoi(argv[3]) : 200;
  if (rounds < 1 || steps < 1 || kernels < 1) {
    std::fprintf(stderr, "usage: bench_cupti_overhead [rounds>=1] [steps_per_round>=1] [kernels_per_step>=1]\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_cupti_overhead: no CUDA device; nothing measured\n");
    return 0;
  }

  constexpr int n = 1 << 20;
  float *x = nullptr, *y = nullptr, *host = nullptr;
  cudaStream_t s;
  if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess || cudaMalloc(&y, n * sizeof(float)) != cudaSuccess ||
      cudaMallocHost(&host, n * sizeof(float)) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) {
    std::fprintf(stderr, "bench_cupti_overhead: CUDA setup failed\n");
    return 1;
  }
  cudaMemset(x, 0, n * sizeof(float));
  cudaMemset(y, 0, n * sizeof(float));

  Recorder rec;
  auto sink = std::make_shared<CountingSink>();
  rec.add_sink(sink);
  install_nvtx_bridge(rec);  // phases are NVTX ranges too, as in the trainer
  rec.start();

  auto measure = [&](std::vector<double>& out) {
    for (int i = 0; i < steps; ++i) {
      PhaseScope step(Phase::Step, uint64_t(i), {}, rec);
      const int64_t t0 = now_ns();
      if (run_step(s, x, y, n, kernels, host, 1 << 20) != cudaSuccess) {
        std::fprintf(stderr, "bench_cupti_overhead: step failed\n");
        std::exit(1);
      }
      out.push_back(double(now_ns() - t0) * 1e-3);
    }
  };
  std::vector<double> warm, off, on, no_phases, after;
  measure(warm);
  for (int r = 0; r < rounds; ++r) measure(off);
  CuptiOptions without;
  without.phase_correlation = false;
  uint64_t records = 0, records_without = 0, dropped = 0;
  for (int r = 0; r < rounds; ++r) {
    {
      CuptiCapture cupti;
      if (!cupti.start(rec)) return 1;
      measure(on);
      cupti.stop();
      records += cupti.stats().convert.records;
      dropped += cupti.stats().cupti_dropped;
    }
    {
      CuptiCapture cupti(without);
      if (!cupti.start(rec)) return 1;
      measure(no_phases);
      cupti.stop();
      records_without += cupti.stats().convert.records;
      dropped += cupti.stats().cupti_dropped;
    }
    measure(after);
  }
  rec.stop();
  uninstall_nvtx_bridge(rec);

  const double m_off = median(off), m_on = median(on), m_without = median(no_phases), m_after = median(after);
  std::printf("step = %d axpy kernels (1M floats) + 1 MiB D2H copy + sync; %d rounds x %d steps\n", kernels, rounds,
              steps);
  std::printf("%-10s %12s %10s\n", "mode", "median us", "vs off");
  std::printf("%-10s %12.1f %9.2f%%\n", "off", m_off, 0.0);
  std::printf("%-10s %12.1f %+9.2f%%\n", "on", m_on, (m_on / m_off - 1) * 100);
  std::printf("%-10s %12.1f %+9.2f%%\n", "no-phases", m_without, (m_without / m_off - 1) * 100);
  std::printf("%-10s %12.1f %+9.2f%%\n", "after", m_after, (m_after / m_off - 1) * 100);
  std::printf("CUPTI records converted %llu (no-phases: %llu), dropped by CUPTI %llu, events recorded %llu\n",
              (unsigned long long)records, (unsigned long long)records_without, (unsigned long long)dropped,
              (unsigned long long)sink->events.load());
  cudaFree(x);
  cudaFree(y);
  cudaFreeHost(host);
  cudaStreamDestroy(s);
  return 0;
}
