// What a training run records: phases (also NVTX ranges), collectives, counters, every event of
// memcomm's allocator and, on a GPU, CUPTI's kernels, copies and driver memory, into per-rank .mct
// files (--trace) and/or a live viewer (--live). Free of LibTorch.
#pragma once

#include <memcomm/train/comm_record.hpp>
#include <memcomm/train/launch.hpp>
#include <memcomm/train/options.hpp>

#include <memcomm/trace/event.hpp>

#include <cstdint>
#include <memory>

namespace memcomm::alloc {
class CachingAllocator;
}

namespace memcomm::train {

// Labels this thread's allocations with `c` in the trace until the scope ends (scopes nest; the
// enclosing label comes back). Costs a thread-local store; works whether or not a run records.
// Note [Memory categories] in profiling.cpp.
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(prof::MemCategory c) noexcept;
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  uint8_t saved_;
};

// The same label without a scope, for callers whose scopes open and close in separate calls (the
// Python bindings' phase hooks): sets this thread's label and returns the one it replaces, which
// the caller puts back.
prof::MemCategory exchange_memory_category(prof::MemCategory c) noexcept;

// Rank `rank`'s trace file of this attempt: --trace's NAME.rankR.mct, and NAME.restartN.rankR.mct in
// torchrun's N-th restart of the job, so a restart keeps the failed attempt's files (as python -m
// memcomm names them) instead of writing over them.
std::string attempt_trace_file(const std::string& trace, const DistEnv& env, int rank);

class RunProfiler {
 public:
  // Starts recording when --trace or --live is given; otherwise does nothing and costs nothing.
  // `allocator` (may be null) gets an observer for its events and a periodic stats sampler.
  // `on_gpu`: the run trains on a GPU, so --cupti auto captures GPU activity (Note [CUPTI in a run]).
  RunProfiler(const TrainOptions& o, const DistEnv& env, alloc::CachingAllocator* allocator, bool on_gpu);
  ~RunProfiler();  // stops, flushes and closes the sinks
  RunProfiler(const RunProfiler&) = delete;
  RunProfiler& operator=(const RunProfiler&) = delete;

  bool active() const { return impl_ != nullptr; }
  // Starts observing `allocator` when the run observes none yet: one installed after the recording
  // began (memcomm.use_allocator inside `with memcomm.profile()`), or a CUDA engine made at its GPU's
  // first allocation. Returns whether the run observes an allocator now.
  bool observe_allocator(alloc::CachingAllocator* allocator);
  void collective(const CollectiveRecord& r);            // a completed collective
  void counter(const char* name, double value);          // loss, samples/s, lr...
  // This rank's clock offset to rank 0 (Note [Clock offsets at rendezvous] in comm.hpp), recorded
  // so that loading the per-rank traces puts them on one timeline.
  void clock_offset(int64_t ns);
  // The world size of the process group this rank joined, recorded when it differs from the one
  // the run started with (a profile started before a launcher set the world up): the reader keeps
  // the last one a file gives.
  void world_size(uint32_t n);
  // Stops recording and returns (events recorded, events dropped); idempotent. Dropped counts the
  // events the trace file lost to a write error (a full disk) too.
  std::pair<int64_t, int64_t> finish();
  // After finish(): why the trace file stopped short, and how much it holds ("" when it is whole).
  // The caller reports it (memcomm-train on stderr, Python as OSError).
  std::string trace_error() const;
  // After finish(): what a live stream's viewer missed ("" when it got every event): events dropped
  // while no viewer was connected, or while it fell behind. The trace file has them all; the run's
  // drop count does not include them. The caller reports it (memcomm-train on stderr, Python as a
  // warning).
  std::string live_note() const;
  // The same while the run goes on, for a rank ended by SIGTERM (torchrun's and Slurm's way), which
  // never reaches finish(): thread-safe.
  std::string live_note_now() const;
  // CPU time the profiler's collector thread used (draining, samplers, trace compression): the
  // profiler's own cost, measurable even when step times are too noisy to show it. 0 if inactive.
  int64_t collector_cpu_ns() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace memcomm::train
