// Datasets, the distributed sampler and the multi-worker loader.
//
// Note [Samples are a function of their index]: every sample, real or synthetic, is a pure function
// of (dataset seed, sample index). Loader workers only decide *who* assembles a batch, never *what*
// is in it, so results do not depend on --workers, and W ranks x batch b see exactly the samples
// that one process with batch W*b sees. This is stronger than per-worker seeding (the tutorials'
// worker_init_fn), which makes results depend on the worker count; each worker still owns a
// generator seeded from (seed, rank, worker, epoch) for work that is allowed to be random.
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <exception>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace memcomm::train {

struct TrainOptions;

struct Batch {
  torch::Tensor inputs;   // float [B,1,28,28] images, float [B,D] tabular, int64 [B,T] tokens
  torch::Tensor targets;  // int64 [B] classes, or int64 [B,T] next tokens
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Assembles the samples `indices` into one batch (Note [Samples are a function of their index]).
  virtual Batch get(const std::vector<int64_t>& indices) const = 0;
  virtual int64_t num_classes() const = 0;
  virtual std::string describe() const = 0;
};

// "train" or "test" split of --dataset. Throws with install instructions when Fashion-MNIST is missing.
std::shared_ptr<Dataset> make_dataset(const TrainOptions& o, const std::string& split);

// PyTorch's DistributedSampler: a seeded permutation per epoch (set_epoch), padded by repeating the
// first indices or truncated so that every rank gets the same count, then rank::world strided.
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int rank, int world, bool shuffle, uint64_t seed, bool pad_tail);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  std::vector<int64_t> indices() const;
  int64_t per_rank() const { return per_rank_; }
  int64_t tail_adjust() const { return tail_adjust_; }  // >0 padded samples, <0 dropped samples

 private:
  int64_t n_, per_rank_, tail_adjust_;
  int rank_, world_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

// Worker threads assemble batches of one epoch ahead of the trainer into a bounded ring of
// `prefetch` slots; the trainer takes them in order. Destruction stops the workers.
class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<Dataset> ds, std::vector<int64_t> indices, int64_t batch_size, int workers,
              int prefetch, bool pin_memory);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  int64_t num_batches() const { return num_batches_; }
  // Next batch in order; false at the end of the epoch. `waited_ns` gets the time spent blocked.
  // Rethrows what a worker threw assembling this batch (the loader is then unusable).
  bool next(Batch& out, int64_t* waited_ns = nullptr);

 private:
  Batch assemble(int64_t b) const;
  void worker_loop(int w);

  std::shared_ptr<Dataset> ds_;
  std::vector<int64_t> indices_;
  int64_t batch_size_, num_batches_;
  int workers_, prefetch_;
  bool pin_;
  std::vector<Batch> slots_;
  std::vector<std::exception_ptr> slot_error_;  // a worker's failure, rethrown by next() at that batch
  std::vector<int64_t> slot_batch_;  // which batch each slot holds, -1 when empty
  int64_t next_out_ = 0;             // next batch the trainer takes
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
};

}  // namespace memcomm::train
