// Runs one rank's training. Free of LibTorch so main.cpp compiles fast.
#pragma once

#include <memcomm/train/launch.hpp>
#include <memcomm/train/options.hpp>

namespace memcomm::train {

// Returns the process exit code. Throws CommError (lost ranks) and std::runtime_error (bad data,
// checkpoints); main() turns them into one clear line each.
int run_training(const TrainOptions& o, const DistEnv& env);

}  // namespace memcomm::train
