// Real training probes for memcomm-tune: the trainer's trial steps (train::TrialRunner) at a
// requested micro-batch under the memory limit, run as long as a steady measurement needs and read
// into the search's ProbeResult. Free of LibTorch, like the whole tuner: the steps live in trainer/.
#pragma once

#include "memcomm/tuner/report.hpp"
#include "memcomm/tuner/search.hpp"

#include <memcomm/train/launch.hpp>
#include <memcomm/train/options.hpp>
#include <memcomm/train/trial.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace memcomm::tune {

struct ProbeSettings {
  int accum_cap = 4;          // micro-steps run per probe step (Note [Probing long accumulations])
  double min_seconds = 0.5;   // timed wall time per probe, at least (Note [Steady-state probes])
  train::UnequalData unequal;  // test hook (--unequal-data)
};

class ProbeRunner {
 public:
  // The trainer's trial setup (allocators under the limit, the other ranks, data, model), then one
  // step at micro-batch 1 (Note [A first step before the probes]). Throws train::UsageError when
  // the limit cannot hold the model itself.
  ProbeRunner(const train::TrainOptions& o, const train::DistEnv& env, const ProbeSettings& settings);
  ProbeRunner(const ProbeRunner&) = delete;
  ProbeRunner& operator=(const ProbeRunner&) = delete;

  // A warm-up step and r.measured_steps timed steps at (b, K, bucket); every rank calls it with the
  // same request and gets the same, agreed result. The model's state is the same afterwards.
  ProbeResult probe(const ProbeRequest& r);
  // `steps` full steps of the recommendation and an evaluation pass, agreed over ranks.
  Verification verify(const Recommendation& rec, int64_t steps);

  // The same value on every rank: the largest of the ranks' values.
  int64_t agree_max(int64_t value);

  bool leader() const { return trial_.rank() == 0; }
  int world() const { return trial_.world(); }
  std::string device_description() const { return trial_.device_description(); }  // for the cache key
  int64_t memory_limit() const { return trial_.memory_limit(); }                  // the cap in force (bytes)
  int64_t model_state_bytes() const { return trial_.model_state_bytes(); }
  int64_t shard_size() const { return trial_.shard_size(); }
  // Stops recording (--trace) and returns (events, drops).
  std::pair<int64_t, int64_t> finish_trace() { return trial_.finish_trace(); }

 private:
  void counters(const ProbeRequest& r, const ProbeResult& x);

  train::TrialRunner trial_;
  ProbeSettings settings_;
  int prefetch_ = 0, workers_ = 0;  // the loader's, for the allowance (Note [Loader allowance])
};

}  // namespace memcomm::tune
