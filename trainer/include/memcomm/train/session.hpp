// One rank's model, optimizer, gradient synchronisation and device feed, and the optimizer step
// over them: the trainer's loop and the tuner's probes run this very step, so what the tuner
// measures is what training does.
#pragma once

#include <memcomm/train/comm.hpp>
#include <memcomm/train/data.hpp>
#include <memcomm/train/grad_sync.hpp>
#include <memcomm/train/models.hpp>
#include <memcomm/train/options.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace memcomm::alloc {
class CachingAllocator;
}

namespace memcomm::train {

// Installs memcomm's CPU allocator (--allocator memcomm) with --memory-limit as its cap, before the
// first tensor; returns it, or null with --allocator torch.
alloc::CachingAllocator* install_allocators(const TrainOptions& o);

// The device this rank computes on and the collective backend, with CPU fallback; UsageError for a
// combination that cannot work here. On a GPU, --memory-limit caps PyTorch's CUDA caching
// allocator (its per-process memory fraction).
struct RankDevice {
  torch::Device device{torch::kCPU};
  Backend backend = Backend::Gloo;  // Gloo or Nccl, never Auto
};
RankDevice choose_device(const TrainOptions& o, const DistEnv& env);
// On a GPU: caps PyTorch's CUDA caching allocator at `limit` bytes (its per-process memory
// fraction); UsageError when the GPU is smaller. Nothing on the CPU, where the cap is memcomm's.
void apply_memory_limit(const torch::Device& dev, int64_t limit);
// Free bytes on `dev` now (cudaMemGetInfo); 0 on the CPU.
int64_t free_device_memory(const torch::Device& dev);

// Memory figures of the allocator serving `dev`: memcomm's on the CPU, PyTorch's on a GPU.
struct MemoryFigures {
  int64_t peak_allocated = -1, peak_reserved = -1;  // bytes since reset_peak_memory(); -1: unknown
  int64_t limit = 0;                                // the cap in force; 0: none
  int64_t reserved = -1;                            // bytes reserved now; -1: unknown
  double fragmentation = -1;                        // memcomm's external fragmentation now; -1: unknown
  const char* allocator = "torch";                  // whose figures: memcomm (CPU), torch-cuda, or torch (none)
};
MemoryFigures memory_figures(const torch::Device& dev, alloc::CachingAllocator* cpu_alloc);
void reset_peak_memory(const torch::Device& dev, alloc::CachingAllocator* cpu_alloc);
// Gives cached memory back (after an out-of-memory, before the next try).
void release_cached_memory(const torch::Device& dev, alloc::CachingAllocator* cpu_alloc);

// Where one step's time went, on this rank (added to by each step).
struct StepTiming {
  int64_t data_wait_ns = 0;     // blocked on the loader
  int64_t backward_ns = 0;      // inside backward (all micro-steps)
  int64_t early_micro_ns = 0;   // the K-1 micro-steps that do not synchronise (no_sync)
  int64_t last_micro_ns = 0;    // the last micro-step, the gradient sync and the optimizer step
  int64_t exposed_comm_ns = 0;  // waiting for gradient all-reduces after backward
};

// Copies batches to the device (Note [Copies on a side stream] in session.cpp).
class DeviceFeeder;

class TrainSession {
 public:
  // Builds the model (seeded with --seed, then rank 0's parameters broadcast), the optimizer and,
  // unless --sync-every asks for local SGD, the bucketed gradient sync.
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

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t samples = 0;
};
// Evaluation under no_grad on the test split: every sample scored exactly once across the ranks
// (Note [Evaluation shards] in data.hpp; --eval-batches caps each rank's batches), summed with one
// all-reduce. Throws when no rank scored a sample (an empty test split).
EvalResult evaluate(ModelImpl& model, const TrainOptions& o, const DistEnv& env, Communicator& comm,
                    const torch::Device& dev);

// FNV-1a over the raw bytes of every parameter: equal on all ranks iff they are bitwise identical.
uint64_t parameter_checksum(const std::vector<torch::Tensor>& params);

}  // namespace memcomm::train
