// One rank's model, optimizer, gradient synchronisation and device feed, and the optimizer step
// over them: the trainer's loop and the tuner's probes run this very step, so what the tuner
// measures is what training does.
#pragma once

#include <memcomm/train/comm.hpp>
#include <memcomm/train/data.hpp>
#include <memcomm/train/grad_sync.hpp>
#include <memcomm/train/models.hpp>
#include <memcomm/train/options.hpp>
#include <memcomm/train/step_timing.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace memcomm::train {

// Copies batches to the device (Note [Copies on a side stream] in session.cpp).
class DeviceFeeder;

class TrainSession {
 public:
  // Builds the model (seeded with --seed, then rank 0's parameters broadcast), the optimizer and,
  // unless --sync-every asks for local SGD, the bucketed gradient sync.
  // Under --mode dp, every replica's GPU gets --memory-limit (DeviceMemory::cap_gpu) too.
  TrainSession(const TrainOptions& o, Communicator& comm, const torch::Device& dev, int64_t num_classes);
  ~TrainSession();
  TrainSession(const TrainSession&) = delete;
  TrainSession& operator=(const TrainSession&) = delete;

  ModelImpl& model() { return *model_; }
  std::vector<torch::Tensor>& params() { return params_; }
  torch::optim::Optimizer& optimizer() { return *opt_; }
  GradSync* sync() { return sync_.get(); }  // null in local-SGD runs
  const std::vector<torch::Device>& dp_devices() const { return dp_devices_; }  // empty unless --mode dp

  void set_lr(double lr);
  // Supplies the next micro-batch and the nanoseconds spent blocked for it.
  using NextBatch = std::function<Batch(int64_t& waited_ns)>;
  // One optimizer step over `accum` micro-batches: forward and backward with the loss scaled by
  // 1/accum, gradients synchronised on the last one only, the optimizer step, gradients zeroed.
  // Returns the step's mean loss. An exception leaves the step half done: see abandon_step().
  // `first_micro` numbers the micro-steps in the trace (Note [Micro-batch position] in trainer.cpp).
  double step(int accum, int64_t first_micro, const NextBatch& next_batch, StepTiming& timing);
  // The model's logits for a batch: model.forward, or LibTorch's data_parallel under --mode dp.
  torch::Tensor forward(const torch::Tensor& x);
  // After step() threw on this rank: issues the collectives the other ranks' step is waiting for
  // and clears the gradients (GradSync::abandon). The parameters may be half updated: restore them.
  void abandon_step();
  // The part of the step running now, or where the last step stopped: data, forward, backward,
  // communication or optimizer (the tuner reports where an out-of-memory struck).
  const char* phase() const { return phase_; }

  // A deep copy of parameters, buffers and optimizer state in host memory outside the tensor
  // allocator (so keeping one does not count against a memory cap), and its restore. Restoring
  // copies into the existing tensors and drops optimizer state created since: it needs no memory
  // unless the copy holds optimizer state, which is then deserialized.
  struct State {
    std::vector<std::string> tensors;  // raw bytes of every parameter, then every buffer
    std::string optimizer;             // serialized optimizer state; empty when there was none
  };
  State save_state();
  void load_state(const State& state);

 private:
  TrainOptions o_;
  torch::Device dev_;
  std::shared_ptr<ModelImpl> model_;
  std::vector<torch::Device> dp_devices_;  // --mode dp: the devices data_parallel splits batches over
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  std::unique_ptr<GradSync> sync_;
  std::unique_ptr<DeviceFeeder> feeder_;
  const char* phase_ = "idle";
};

}  // namespace memcomm::train
