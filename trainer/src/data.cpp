#include <memcomm/train/data.hpp>

#include "idx_file.hpp"

#include <memcomm/train/errors.hpp>
#include <memcomm/train/options.hpp>
#include <memcomm/train/profiling.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>

namespace memcomm::train {

namespace {

// A split's two IDX files, (images, labels); UsageError when either is missing.
std::pair<std::string, std::string> fashion_mnist_files(const std::string& dir, const std::string& split) {
  const std::string prefix = split == "train" ? "train" : "t10k";
  const auto img = fashion_mnist_path(dir, split, false);
  const auto lab = fashion_mnist_path(dir, split, true);
  if (!std::filesystem::exists(img) || !std::filesystem::exists(lab))
    throw UsageError("Fashion-MNIST not found in " + dir +
                             " (expected " + prefix + "-images-idx3-ubyte.gz and " + prefix +
                             "-labels-idx1-ubyte.gz). Install it with 'apt-get install dataset-fashion-mnist' "
                             "or point --data-dir at a folder holding the IDX files.");
  return {img, lab};
}

// Fashion-MNIST: images [N,1,28,28] as bytes, labels [N]; normalised on assembly.
class FashionMnist final : public Dataset {
 public:
  FashionMnist(const std::string& dir, const std::string& split) {
    const auto [img, lab] = fashion_mnist_files(dir, split);
    auto images = read_idx_u8(img);
    auto labels = read_idx_u8(lab);
    check_fashion_mnist(images, img, labels, lab);
    const int64_t n = images.dims[0];
    images_ = torch::from_blob(images.data.data(), {n, 1, images.dims[1], images.dims[2]}, torch::kUInt8).clone();
    labels_ = torch::from_blob(labels.data.data(), {n}, torch::kUInt8).to(torch::kInt64);
    desc_ = "fashion-mnist/" + split + " (" + std::to_string(n) + " images)";
  }
  int64_t size() const override { return images_.size(0); }
  int64_t num_classes() const override { return 10; }
  std::string describe() const override { return desc_; }
  Batch get(const std::vector<int64_t>& idx) const override {
    auto i = torch::tensor(idx, torch::kInt64);
    // Mean and std of the Fashion-MNIST training images.
    auto x = images_.index_select(0, i).to(torch::kFloat32).div_(255.0f).sub_(0.2860f).div_(0.3530f);
    return {x, labels_.index_select(0, i)};
  }

 private:
  torch::Tensor images_, labels_;
  std::string desc_;
};

// A learnable synthetic classification set: x ~ N(0, 1) per (seed, index), y = argmax(T x) for a
// fixed random teacher T, so an MLP can fit it and the loss must fall.
class SyntheticTabular final : public Dataset {
 public:
  SyntheticTabular(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0x7ab1e);
    teacher_ = torch::randn({kClasses, kFeatures}, g);
  }
  int64_t size() const override { return n_; }
  int64_t num_classes() const override { return kClasses; }
  std::string describe() const override { return "tabular (synthetic, " + std::to_string(n_) + " rows)"; }
  Batch get(const std::vector<int64_t>& idx) const override {
    auto x = torch::empty({static_cast<int64_t>(idx.size()), kFeatures});
    for (size_t r = 0; r < idx.size(); ++r) {
      auto g = at::make_generator<at::CPUGeneratorImpl>(seed_ * 1000003ULL + static_cast<uint64_t>(idx[r]));
      x[static_cast<int64_t>(r)].normal_(0, 1, g);
    }
    auto y = torch::matmul(x, teacher_.t()).argmax(1);
    return {x, y};
  }
  static constexpr int64_t kFeatures = 784;  // same width as a flattened image, so --model mlp fits both
  static constexpr int64_t kClasses = 10;

 private:
  int64_t n_;
  uint64_t seed_;
  torch::Tensor teacher_;
};

// A synthetic token stream with structure to learn: a fixed random transition table where each token
// has a few likely successors. Sample i is the window starting at i*seq_len; targets are shifted by one.
class SyntheticTokens final : public Dataset {
 public:
  SyntheticTokens(int64_t n, int seq_len, int vocab, uint64_t seed) : n_(n), seq_(seq_len), vocab_(vocab), seed_(seed) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0x70c5);
    successors_ = torch::randint(vocab, {vocab, 4}, g);
  }
  int64_t size() const override { return n_; }
  int64_t num_classes() const override { return vocab_; }
  std::string describe() const override {
    return "tokens (synthetic, " + std::to_string(n_) + " windows of " + std::to_string(seq_) + ")";
  }
  Batch get(const std::vector<int64_t>& idx) const override {
    const int64_t B = static_cast<int64_t>(idx.size());
    auto seq = torch::empty({B, seq_ + 1}, torch::kInt64);
    auto acc = seq.accessor<int64_t, 2>();
    auto succ = successors_.accessor<int64_t, 2>();
    for (int64_t r = 0; r < B; ++r) {
      uint64_t s = (seed_ + 1) * 0x9E3779B97F4A7C15ULL ^ static_cast<uint64_t>(idx[static_cast<size_t>(r)]);
      auto next_rand = [&s] { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; };
      int64_t tok = static_cast<int64_t>(next_rand() % static_cast<uint64_t>(vocab_));
      for (int t = 0; t <= seq_; ++t) {
        acc[r][t] = tok;
        const uint64_t u = next_rand();
        tok = (u % 10 == 0) ? static_cast<int64_t>(u / 10 % static_cast<uint64_t>(vocab_)) : succ[tok][static_cast<int64_t>(u % 4)];
      }
    }
    return {seq.narrow(1, 0, seq_).contiguous(), seq.narrow(1, 1, seq_).contiguous()};
  }

 private:
  int64_t n_;
  int seq_, vocab_;
  uint64_t seed_;
  torch::Tensor successors_;
};

}  // namespace

void check_dataset_files(const TrainOptions& o, const std::string& split) {
  if (resolved_dataset(o) == DatasetKind::FashionMnist) fashion_mnist_files(o.data_dir, split);
}

std::shared_ptr<Dataset> make_dataset(const TrainOptions& o, const std::string& split) {
  // A dataset held in memory (Fashion-MNIST's tensors) is the run's input, as its batches are.
  const MemoryCategoryScope category(prof::MemCategory::Input);
  const uint64_t split_seed = o.seed * 2 + (split == "train" ? 0 : 1);
  const int64_t n = split == "train" ? o.synthetic_size : std::max<int64_t>(o.synthetic_size / 6, 1);
  switch (resolved_dataset(o)) {
    case DatasetKind::FashionMnist: return std::make_shared<FashionMnist>(o.data_dir, split);
    case DatasetKind::Tabular: return std::make_shared<SyntheticTabular>(n, split_seed);
    case DatasetKind::Tokens: return std::make_shared<SyntheticTokens>(n, o.seq_len, o.vocab, split_seed);
    case DatasetKind::Auto: break;  // resolved_dataset never returns it
  }
  throw std::logic_error("make_dataset: --dataset auto was not resolved");
}

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t augment_seed(uint64_t seed, int64_t epoch) {
  return splitmix64(splitmix64(seed ^ 0xa06e0a06ULL) + static_cast<uint64_t>(epoch));
}

void flip_images(torch::Tensor& inputs, const std::vector<int64_t>& indices, uint64_t seed) {
  if (inputs.dim() != 4 || inputs.size(0) != static_cast<int64_t>(indices.size()))
    throw std::logic_error("flip_images: expected [B,C,H,W] images, one row per index");
  std::vector<int64_t> rows;
  for (size_t r = 0; r < indices.size(); ++r)
    if (splitmix64(seed ^ splitmix64(static_cast<uint64_t>(indices[r]))) & 1) rows.push_back(static_cast<int64_t>(r));
  if (rows.empty()) return;
  const auto sel = torch::tensor(rows, torch::kInt64);
  inputs.index_copy_(0, sel, inputs.index_select(0, sel).flip({3}));
}

std::vector<int64_t> strided_shard(int64_t n, int rank, int world) {
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(n / world + 1));
  for (int64_t i = rank; i < n; i += world) mine.push_back(i);
  return mine;
}

DistributedSampler::DistributedSampler(int64_t n, int rank, int world, bool shuffle, uint64_t seed, bool pad_tail)
    : n_(n), rank_(rank), world_(world), shuffle_(shuffle), seed_(seed) {
  per_rank_ = pad_tail ? (n + world - 1) / world : n / world;
  tail_adjust_ = per_rank_ * world - n;
  if (per_rank_ == 0)
    throw UsageError("the dataset has " + std::to_string(n) + " sample(s), fewer than the " + std::to_string(world) +
                     " ranks (use a larger --synthetic-size" + (n > 0 ? std::string(", or --tail pad") : std::string()) + ")");
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all(static_cast<size_t>(n_));
  if (shuffle_) {
    // Same seed and epoch on every rank gives every rank the same permutation (set_epoch semantics).
    auto g = at::make_generator<at::CPUGeneratorImpl>(seed_ + static_cast<uint64_t>(epoch_));
    auto perm = torch::randperm(n_, g, torch::kInt64);
    std::copy(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + n_, all.begin());
  } else {
    for (int64_t i = 0; i < n_; ++i) all[static_cast<size_t>(i)] = i;
  }
  const int64_t total = per_rank_ * world_;
  for (int64_t i = n_; i < total; ++i) all.push_back(all[static_cast<size_t>(i - n_)]);  // pad by wrapping
  all.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (int64_t i = rank_; i < total; i += world_) mine.push_back(all[static_cast<size_t>(i)]);
  return mine;
}

BatchLoader::BatchLoader(std::shared_ptr<Dataset> ds, std::vector<int64_t> indices, int64_t batch_size, int workers,
                         int prefetch, bool pin_memory, LoaderOptions lo)
    : ds_(std::move(ds)), indices_(std::move(indices)), batch_size_(batch_size),
      // See Note [Partial batches]: training keeps one shape and drops the short last batch.
      num_batches_((static_cast<int64_t>(indices_.size()) + (lo.keep_partial ? batch_size - 1 : 0)) / batch_size),
      workers_(workers), prefetch_(prefetch), pin_(pin_memory), lo_(lo),
      slots_(static_cast<size_t>(prefetch)), slot_error_(static_cast<size_t>(prefetch)),
      slot_batch_(static_cast<size_t>(prefetch), -1) {
  for (int w = 0; w < workers_; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

Batch BatchLoader::assemble(int64_t b) const {
  const auto end = std::min<int64_t>((b + 1) * batch_size_, static_cast<int64_t>(indices_.size()));
  std::vector<int64_t> idx(indices_.begin() + b * batch_size_, indices_.begin() + end);
  Batch batch = ds_->get(idx);
  if (lo_.augment_seed) flip_images(batch.inputs, idx, *lo_.augment_seed);
  if (pin_) {
    batch.inputs = batch.inputs.pin_memory();
    batch.targets = batch.targets.pin_memory();
  }
  return batch;
}

void BatchLoader::worker_loop(int w) {
  MemoryCategoryScope cat(prof::MemCategory::Input);  // Note [Memory categories] in profiling.cpp
  for (int64_t b = w; b < num_batches_; b += workers_) {
    const size_t slot = static_cast<size_t>(b % prefetch_);
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || (slot_batch_[slot] == -1 && b < next_out_ + prefetch_); });
      if (stop_) return;
    }
    // A failure (out of memory under a cap, a bad sample) reaches the trainer at this batch.
    Batch batch;
    std::exception_ptr error;
    try {
      batch = assemble(b);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      slots_[slot] = std::move(batch);
      slot_error_[slot] = error;
      slot_batch_[slot] = b;
    }
    cv_.notify_all();
    if (error) return;
  }
}

bool BatchLoader::next(Batch& out, int64_t* waited_ns) {
  if (next_out_ >= num_batches_) return false;
  const auto t0 = std::chrono::steady_clock::now();
  if (workers_ == 0) {
    MemoryCategoryScope cat(prof::MemCategory::Input);
    out = assemble(next_out_++);
  } else {
    const size_t slot = static_cast<size_t>(next_out_ % prefetch_);
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return slot_batch_[slot] == next_out_; });
    out = std::move(slots_[slot]);
    if (auto error = std::exchange(slot_error_[slot], nullptr)) std::rethrow_exception(error);
    slot_batch_[slot] = -1;
    ++next_out_;
    lk.unlock();
    cv_.notify_all();
  }
  if (waited_ns)
    *waited_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  return true;
}

}  // namespace memcomm::train
