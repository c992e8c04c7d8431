// The evaluation pass that ends a run (and the tuner's verification).
#pragma once

#include <memcomm/train/comm.hpp>
#include <memcomm/train/launch.hpp>
#include <memcomm/train/models.hpp>
#include <memcomm/train/options.hpp>

#include <cstdint>

namespace memcomm::train {

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t samples = 0;
};

// Evaluation under no_grad on the test split: every sample scored exactly once across the ranks
// (Note [Evaluation shards] in data.hpp; --eval-batches caps each rank's batches), summed with one
// all-reduce. Throws when no rank scored a sample (an empty test split).
EvalResult evaluate(ModelImpl& model, const TrainOptions& o, const DistEnv& env, Communicator& comm,
                    const torch::Device& dev);

}  // namespace memcomm::train
