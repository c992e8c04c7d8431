// Checkpoints: one file per rank (each rank keeps its own optimizer state), written atomically
// (temp file, fsync, rename, fsync of the folder) so a crash leaves the previous checkpoint intact.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace memcomm::train {

// Throws std::runtime_error when `dir` cannot be created or written (checked before training).
void ensure_writable_dir(const std::string& dir);

void save_checkpoint(const std::string& dir, int rank, int64_t step, torch::nn::Module& model,
                     torch::optim::Optimizer& opt);

// Restores model and optimizer; returns the step to continue from, or -1 when there is no
// checkpoint. A corrupt or mismatched file is a std::runtime_error naming it.
int64_t load_checkpoint(const std::string& dir, int rank, torch::nn::Module& model, torch::optim::Optimizer& opt);

}  // namespace memcomm::train
