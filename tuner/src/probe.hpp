// Real training probes for memcomm-tune: one rank's model, data and gradient sync, stepped at a
// requested micro-batch under the memory limit, with out-of-memory caught and recovered in process.
// Free of LibTorch (the session lives in probe.cpp).
#pragma once

#include "memcomm/tuner/report.hpp"
#include "memcomm/tuner/search.hpp"

#include <memcomm/train/launch.hpp>
#include <memcomm/train/options.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace memcomm::tune {

struct ProbeSettings {
  int accum_cap = 4;          // micro-steps run per probe step (Note [Probing long accumulations])
  double min_seconds = 0.5;   // timed wall time per probe, at least (Note [Steady-state probes])
  int64_t heavy_rank = -1;    // test hook (unequal data): this rank's samples take
  int64_t heavy_bytes_per_sample = 0;  // this many bytes more, held through each step
};

class ProbeRunner {
 public:
  // Installs the allocators under the limit, joins the other ranks, loads the data, builds the
  // model. Throws train::UsageError when the limit cannot hold the model itself.
  ProbeRunner(const train::TrainOptions& o, const train::DistEnv& env, const ProbeSettings& settings);
  ~ProbeRunner();
  ProbeRunner(const ProbeRunner&) = delete;
  ProbeRunner& operator=(const ProbeRunner&) = delete;

  // A warm-up step and r.measured_steps timed steps at (b, K, bucket); every rank calls it with the
  // same request and gets the same, agreed result. The model's state is the same afterwards.
  ProbeResult probe(const ProbeRequest& r);
  // `steps` full steps of the recommendation and an evaluation pass, agreed over ranks.
  Verification verify(const Recommendation& rec, int64_t steps);

  // The same value on every rank: the largest of the ranks' values.
  int64_t agree_max(int64_t value);

  bool leader() const;
  int world() const;
  std::string device_description() const;  // "cpu" or the GPU's name, for the cache key
  int64_t memory_limit() const;             // the cap in force (bytes)
  int64_t model_state_bytes() const;        // parameters + gradients + optimizer state
  // Stops recording (--trace) and returns (events, drops).
  std::pair<int64_t, int64_t> finish_trace();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace memcomm::tune
