// A training-like event stream for the profiler benchmarks (and codec experiments).
#pragma once

#include <random>
#include <vector>

#include "memcomm/trace/event.hpp"

namespace memcomm::prof::bench {

// A training-like event stream: per "step" phases, allocations/frees, kernels, a collective,
// memory samples and a loss counter, with realistic timestamps and addresses.
inline std::vector<Event> training_like(size_t n) {
  std::vector<Event> v;
  v.reserve(n);
  std::mt19937_64 rng(42);
  int64_t t = 1'000'000'000;
  uint32_t corr = 1, seq = 0;
  uint64_t step = 0;
  std::vector<std::pair<uint64_t, uint64_t>> live;
  while (v.size() < n) {
    v.push_back(Event::from(make_range(EventKind::RangeBegin, t, Phase::Step, 0, step, 0)));
    for (int phase = 0; phase < 3 && v.size() < n; ++phase) {
      const Phase p = phase == 0 ? Phase::Forward : phase == 1 ? Phase::Backward : Phase::Optimizer;
      v.push_back(Event::from(make_range(EventKind::RangeBegin, t += 500, p, 0, 0, 0)));
      for (int i = 0; i < 60 && v.size() < n; ++i) {
        t += 200 + int64_t(rng() % 3000);
        if (rng() % 2 || live.empty()) {
          const uint64_t addr = 0x7f00'0000'0000ull + (rng() % (1u << 30)) * 512, size = 512 * (1 + rng() % 8192);
          live.emplace_back(addr, size);
          v.push_back(Event::from(make_mem_block(EventKind::Alloc, t, addr, size, 0, 0)));
        } else {
          const auto [addr, size] = live.back();
          live.pop_back();
          v.push_back(Event::from(make_mem_block(EventKind::FreeRequested, t, addr, size, 0, 0)));
        }
        v.push_back(Event::from(make_compute(EventKind::Kernel, t + 3000, t + 3000 + int64_t(rng() % 50000), 7,
                                             uint32_t(1 + rng() % 40), corr++, 0)));
      }
      v.push_back(Event::from(make_range(EventKind::RangeEnd, t += 500, p, 0, 0, 0)));
      if (p == Phase::Backward) {
        v.push_back(Event::from(make_collective(EventKind::CollStart, t, CollOp::AllReduce, DType::F32, 25u << 20, 0, seq)));
        v.push_back(Event::from(make_collective(EventKind::CollEnd, t + 900000, CollOp::AllReduce, DType::F32, 25u << 20, 0, seq++)));
      }
    }
    v.push_back(Event::from(make_mem_sample(t, MemMetric::Allocated, 1ull << 33)));
    v.push_back(Event::from(make_counter(t, 41, 2.5 / double(step + 1))));
    v.push_back(Event::from(make_range(EventKind::RangeEnd, t += 100, Phase::Step, 0, step++, 0)));
  }
  v.resize(n);
  return v;
}

}  // namespace memcomm::prof::bench
