// Checkpoints: one file per rank (each rank keeps its own optimizer state), written atomically
// (temp file, fsync, rename, fsync of the folder) so a crash leaves the previous checkpoint intact,
// and renamed into place only once every rank's is on disk (Note [Checkpoints saved together]); the
// previous file is kept until every rank has renamed its new one (Note [A save cut short]).
#pragma once

#include <memcomm/common/replacing_file.hpp>

#include "checkpoint_file.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace memcomm::train {

// Throws std::runtime_error when `dir` cannot be created or written (checked before training).
void ensure_writable_dir(const std::string& dir);

// Note [Checkpoint fingerprint]: a checkpoint records the configuration that shapes its contents
// and the data stream it continues (checkpoint_fingerprint() in options.hpp: model flags, ranks,
// seed, batch, accumulation, optimizer...). Resuming compares it, and every parameter's shape,
// with this run's, and names what differs (UsageError, exit 2), instead of loading tensors of
// another shape into the model and failing mid-step, or silently continuing a different run.
// Checkpoints written before the fingerprint existed are accepted with a warning: their parameter
// shapes are still checked, the flags cannot be.
// The Fingerprint type and its text form: checkpoint_file.hpp.

// Writes this rank's checkpoint at `step` and syncs it to disk under a temporary name: commit() puts
// it in place, and dropping it uncommitted removes it (See Note [Checkpoints saved together] in
// trainer.cpp for why the two are apart). Throws OutputError naming the checkpoint when it cannot be
// written.
std::unique_ptr<ReplacingStream> write_checkpoint(const std::string& dir, int rank, int64_t step,
                                                  torch::nn::Module& model, torch::optim::Optimizer& opt,
                                                  const Fingerprint& fingerprint, double next_lr);

// The steps of a rank's two checkpoint files (Note [A save cut short] in trainer.cpp): its newest
// (checkpoint_path) and the one a save in progress kept (previous_checkpoint_path); -1 where there is
// no file.
struct CheckpointSteps {
  int64_t newest = -1, previous = -1;
  int64_t latest() const { return std::max(newest, previous); }
  bool has(int64_t step) const { return step >= 0 && (step == newest || step == previous); }
  std::string path_of(const std::string& dir, int rank, int64_t step) const;  // the file at `step` (has(step))
};
// Read from the files' headers (from the archive for files written before headers held the step);
// a file that cannot be read is a std::runtime_error naming it.
CheckpointSteps checkpoint_steps(const std::string& dir, int rank);
// A save's commit: the rank's newest file becomes its previous one (before the new file takes its
// name), and once every rank has committed the previous one goes. Throws std::runtime_error naming
// the files when the first rename fails.
void keep_previous(const std::string& dir, int rank);
void drop_previous(const std::string& dir, int rank);

// Restores model and optimizer from checkpoint file `path`; returns the step to continue from, or -1
// when there is no such file. A corrupt file is a std::runtime_error naming it; one written by a run
// with another configuration (Note [Checkpoint fingerprint]) or by another rank a UsageError naming
// the file and what differs. `warn` is set when the file predates fingerprints; `next_lr` to the
// learning rate the saving run would have given the next step, where the file records it (Note [A
// schedule resumed] in trainer.cpp).
int64_t load_checkpoint(const std::string& path, int rank, torch::nn::Module& model, torch::optim::Optimizer& opt,
                        const Fingerprint& fingerprint, std::string* warn = nullptr,
                        std::optional<double>* next_lr = nullptr);

}  // namespace memcomm::train
