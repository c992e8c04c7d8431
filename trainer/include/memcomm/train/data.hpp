// Datasets, the distributed sampler and the multi-worker loader.
//
// Note [Samples are a function of their index]: every sample, real or synthetic, is a pure function
// of (dataset seed, sample index). Loader workers only decide *who* assembles a batch, never *what*
// is in it, so results do not depend on --workers, and W ranks x batch b see exactly the samples
// that one process with batch W*b sees.
//
// Note [Seeded augmentation]: the tutorials seed each DataLoader worker (worker_init_fn) so that
// workers do not repeat each other's random transforms; the price is that results change with the
// worker count. Here the one random transform (--augment: horizontal flips of the images) draws
// from a generator keyed by (--seed, epoch, sample index), not by worker, so a sample is flipped
// the same way whichever worker, rank or batch size assembles it, each epoch flips differently,
// and --workers 0, 1 or 3 train bitwise identically. There is no per-worker generator.
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <exception>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
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
// Throws UsageError when the files `split` reads are missing, before a run that needs them later
// (the test split, read at the end) trains for nothing.
void check_dataset_files(const TrainOptions& o, const std::string& split);

// The seed of epoch `epoch`'s augmentation (Note [Seeded augmentation]).
uint64_t augment_seed(uint64_t seed, int64_t epoch);
// Flips, in place, the images of `inputs` ([B,1,H,W]) whose sample index hashes odd under `seed`
// (Note [Seeded augmentation]); `indices` are the batch's sample indices, in row order.
void flip_images(torch::Tensor& inputs, const std::vector<int64_t>& indices, uint64_t seed);

// Note [Evaluation shards]: evaluation needs every test sample scored exactly once, not equal
// shards (it has no per-batch collective, only one all-reduce of sums at the end), so rank r takes
// samples r, r+W, r+2W... with no padding: shards differ by at most one sample.
std::vector<int64_t> strided_shard(int64_t n, int rank, int world);

// PyTorch's DistributedSampler: a seeded permutation per epoch (set_epoch), padded by repeating the
// first indices or truncated so that every rank gets the same count, then rank::world strided.
//
// Note [Partial batches]: training batches all have --batch-size rows (one shape per step, and
// --accum K x b equal to one batch of K*b), so each rank's last per_rank % batch_size samples of
// an epoch are not trained on; the trainer says how many. They differ each epoch (set_epoch).
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

// What a BatchLoader does besides cutting batches.
struct LoaderOptions {
  // Also yield the last, short batch. Training drops it (Note [Partial batches]); evaluation keeps
  // it, since it has no gradients and must score every sample.
  bool keep_partial = false;
  // Flip images with this seed (Note [Seeded augmentation]); unset: no augmentation.
  std::optional<uint64_t> augment_seed;
};

// Worker threads assemble batches of one epoch ahead of the trainer into a bounded ring of
// `prefetch` slots; the trainer takes them in order. Destruction stops the workers.
class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<Dataset> ds, std::vector<int64_t> indices, int64_t batch_size, int workers,
              int prefetch, bool pin_memory, LoaderOptions lo = {});
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
  LoaderOptions lo_;
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
