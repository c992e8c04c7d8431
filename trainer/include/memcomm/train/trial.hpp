// Trial steps: one rank's whole training setup (allocators under the memory limit, the process
// group, the data, the model, its gradient sync), stepped at any micro-batch, accumulation and
// bucket size. Every trial starts from the same model state and leaves it so; an out-of-memory on
// any rank is agreed over the ranks and recovered from in process. memcomm-tune's probes drive it
// (tuner/src/probe.cpp), and choose there how long to run and how to read the timings.
// Free of LibTorch.
#pragma once

#include <memcomm/train/launch.hpp>
#include <memcomm/train/options.hpp>
#include <memcomm/train/step_timing.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace memcomm::train {

// Test hook (memcomm-tune --unequal-data): rank `rank`'s samples hold `bytes_per_sample` more
// memory each, for the whole step.
struct UnequalData {
  int64_t rank = -1;
  int64_t bytes_per_sample = 0;
};

// What one trial runs.
struct TrialPlan {
  int64_t micro_batch = 1;
  int accum = 1;               // micro-steps per optimizer step
  double bucket_mb = 0;        // gradient bucket cap, re-packed first when it changes; 0: as it is
  int64_t warmup_micro = 0;    // micro-batches consumed before timing starts (whole steps)
  int64_t min_steps = 1;       // timed steps, at least
  double min_seconds = 0;      // timed wall time, at least
  int64_t max_steps = 1;       // timed steps, at most
  bool first_epoch = false;    // the data order of a fresh memcomm-train run, not the next epoch's
  bool evaluate = false;       // an evaluation pass after the steps
};

// What one trial measured. `oom`, `oom_where` and `oom_rank` are agreed over the ranks; the rest is
// this rank's own, and only meaningful without an out-of-memory.
struct TrialOutcome {
  bool oom = false;
  std::string oom_where;        // "data", "forward", ..., "buckets", "evaluation"; "rank R ..." when world > 1
  int oom_rank = -1;            // lowest rank that ran out of memory
  std::vector<StepTiming> timed;
  double steps_wall_s = 0;      // the steps' wall time, untimed ones included (not the evaluation)
  int64_t peak_allocated = -1;  // bytes since the trial began (evaluation included); -1: unknown
  int64_t peak_reserved = -1;
  int64_t batch_bytes = 0;      // one micro-batch's inputs and targets, as last loaded
  double eval_loss = 0, eval_accuracy = 0;  // when the plan asked for an evaluation
};

class TrialRunner {
 public:
  // Installs the allocators under --memory-limit (on a GPU without one: its free memory), joins the
  // other ranks, loads the data and builds the model. UsageError when the limit cannot hold the
  // model and its data.
  TrialRunner(const TrainOptions& o, const DistEnv& env, const UnequalData& unequal = {});
  ~TrialRunner();
  TrialRunner(const TrialRunner&) = delete;
  TrialRunner& operator=(const TrialRunner&) = delete;

  // Every rank calls it with the same plan. The cache is emptied and the peaks reset first; the
  // model, optimizer and cache are restored afterwards, out of memory or not.
  TrialOutcome run(const TrialPlan& plan);

  // Every value's largest over the ranks, in one all-reduce.
  std::vector<double> agree_max(std::vector<double> values);
  // A counter in the --trace recording (nothing without one).
  void counter(const char* name, double value);
  // Stops recording (--trace) and returns (events, drops).
  std::pair<int64_t, int64_t> finish_trace();

  int rank() const;
  int world() const;
  std::string device_description() const;  // "cpu:<model name> x<N> threads" or "cuda:<GPU name>"
  int64_t memory_limit() const;             // the cap in force (bytes)
  int64_t model_state_bytes() const;        // parameters + gradients + optimizer state
  int64_t shard_size() const;               // training samples a rank draws per epoch: the largest micro-batch

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace memcomm::train
