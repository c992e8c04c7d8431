// What a training run records: phases (also NVTX ranges), collectives, counters and every event of
// memcomm's allocator, into per-rank .mct files (--trace) and/or a live viewer (--live).
// Free of LibTorch.
#pragma once

#include "comm_record.hpp"
#include "launch.hpp"
#include "options.hpp"

#include <memory>

namespace memcomm::alloc {
class CachingAllocator;
}

namespace memcomm::train {

class RunProfiler {
 public:
  // Starts recording when --trace or --live is given; otherwise does nothing and costs nothing.
  // `allocator` (may be null) gets an observer for its events and a periodic stats sampler.
  RunProfiler(const TrainOptions& o, const DistEnv& env, alloc::CachingAllocator* allocator);
  ~RunProfiler();  // stops, flushes and closes the sinks
  RunProfiler(const RunProfiler&) = delete;
  RunProfiler& operator=(const RunProfiler&) = delete;

  bool active() const { return impl_ != nullptr; }
  void collective(const CollectiveRecord& r);            // a completed collective
  void counter(const char* name, double value);          // loss, samples/s, lr...
  // Stops recording and returns (events recorded, events dropped); idempotent.
  std::pair<int64_t, int64_t> finish();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace memcomm::train
