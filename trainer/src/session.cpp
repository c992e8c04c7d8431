#include <memcomm/train/session.hpp>

#include <ATen/autocast_mode.h>
#include <torch/nn/parallel/data_parallel.h>
#if __has_include(<c10/cuda/CUDAStream.h>)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#define MEMCOMM_TRAINER_CUDA 1
#endif
#if __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#endif
#include <memcomm/allocator/torch_allocator.hpp>
#include <memcomm/profiler/recorder.hpp>

#include <memcomm/train/errors.hpp>
#include <memcomm/train/profiling.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

namespace memcomm::train {

namespace {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o, std::vector<torch::Tensor> params) {
  switch (o.optimizer) {
    case OptimizerKind::Sgd:
      return std::make_unique<torch::optim::SGD>(
          params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
    case OptimizerKind::Adam:
      return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
    case OptimizerKind::AdamW:
      return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
  }
  throw std::logic_error("make_optimizer: not an OptimizerKind");  // unreachable: the switch is exhaustive
}

// bf16 autocast for the forward pass only, as torch.autocast(device_type="cuda", dtype=torch.bfloat16);
// a scope, so that a forward that throws (out of memory) does not leave autocast on.
class AutocastScope {
 public:
  explicit AutocastScope(bool on) : on_(on) {
    if (!on_) return;
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  }
  ~AutocastScope() {
    if (!on_) return;
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool on_;
};

}  // namespace

// Note [Copies on a side stream]: batches arrive in pinned host memory (the loader pins them) and
// are copied to the GPU on a dedicated stream, so the copy engine works while the compute stream
// is busy; the compute stream waits on an event, and the tensors are recorded on it so the caching
// allocator does not reuse their memory early.
class DeviceFeeder {
 public:
  explicit DeviceFeeder(const torch::Device& dev) : dev_(dev) {
#ifdef MEMCOMM_TRAINER_CUDA
    if (dev.is_cuda()) copy_stream_ = c10::cuda::getStreamFromPool(false, dev.index());
#endif
  }
  void to_device(const Batch& b, torch::Tensor& x, torch::Tensor& y) {
    if (!dev_.is_cuda()) {
      x = b.inputs;
      y = b.targets;
      return;
    }
#ifdef MEMCOMM_TRAINER_CUDA
    auto compute = c10::cuda::getCurrentCUDAStream(dev_.index());
    {
      c10::cuda::CUDAStreamGuard guard(*copy_stream_);
      x = b.inputs.to(dev_, /*non_blocking=*/true);
      y = b.targets.to(dev_, /*non_blocking=*/true);
    }
    at::cuda::CUDAEvent copied;
    copied.record(*copy_stream_);
    copied.block(compute);
    x.record_stream(compute);
    y.record_stream(compute);
#else
    x = b.inputs.to(dev_, true);
    y = b.targets.to(dev_, true);
#endif
  }

 private:
  torch::Device dev_;
#ifdef MEMCOMM_TRAINER_CUDA
  std::optional<c10::cuda::CUDAStream> copy_stream_;
#endif
};

TrainSession::TrainSession(const TrainOptions& o, Communicator& comm, const torch::Device& dev, int64_t num_classes)
    : o_(o), dev_(dev), feeder_(std::make_unique<DeviceFeeder>(dev)) {
  {
    MemoryCategoryScope cat(prof::MemCategory::Parameter);
    torch::manual_seed(o.seed);
    model_ = make_model(o, num_classes);
    model_->to(dev);
    params_ = model_->parameters();
    // Parameters and buffers start equal everywhere: rank 0's copy wins.
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> state;
    for (auto& p : params_) state.push_back(p.detach());
    for (auto& b : model_->buffers()) state.push_back(b);
    // Note [Testing the broadcast]: every rank seeds the same, so without this hook a broadcast that
    // did nothing would go unseen; the hook makes the ranks start different (1e-3 * rank on every
    // parameter), and the checksums show the broadcast made them equal.
    if (o.test_perturb_init && comm.rank() != 0)
      for (auto& p : state) p.add_(1e-3 * comm.rank());
    const uint64_t before = o.print_checksums ? parameter_checksum(params_) : 0;
    comm.broadcast(state, 0);
    if (o.print_checksums)
      std::printf("init checksum rank %d before-broadcast %016llx after-broadcast %016llx\n", comm.rank(),
                  static_cast<unsigned long long>(before), static_cast<unsigned long long>(parameter_checksum(params_)));
  }
  if (o.mode == Mode::Dp) {
    // Note [Replicas for --mode dp]: every visible GPU, or the one CPU device.
    if (dev.is_cuda()) {
      for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i) {
        dp_devices_.emplace_back(torch::kCUDA, static_cast<torch::DeviceIndex>(i));
        if (i != dev.index()) apply_memory_limit(dp_devices_.back(), o.memory_limit);  // every replica's GPU
      }
    } else
      dp_devices_.push_back(dev);
  }
  opt_ = make_optimizer(o, params_);
  if (o.sync_every == 0) sync_ = std::make_unique<GradSync>(params_, comm, o.bucket_mb, o.overlap, o.grad_compression);
  if (sync_) sync_->zero_grad();  // GradSync labels its buckets Gradient itself
}

TrainSession::~TrainSession() = default;

void TrainSession::set_lr(double lr) {
  for (auto& g : opt_->param_groups()) g.options().set_lr(lr);
}

double TrainSession::step(int accum, int64_t first_micro, const NextBatch& next_batch, StepTiming& t) {
  if (!sync_) opt_->zero_grad();
  // The loss stays on the device until the step ends: one host sync per step, not per micro-batch.
  torch::Tensor loss_sum;
  int64_t t_micro = monotonic_ns();
  for (int k = 0; k < accum; ++k) {
    prof::PhaseScope micro_scope(prof::Phase::MicroStep, static_cast<uint64_t>(first_micro + k));
    Batch b;
    {
      prof::PhaseScope wait_scope(prof::Phase::DataWait);
      MemoryCategoryScope cat(prof::MemCategory::Input);
      phase_ = "data";
      int64_t waited = 0;
      b = next_batch(waited);
      t.data_wait_ns += waited;
    }
    torch::Tensor x, y;
    phase_ = "forward";  // the copy to the device allocates there
    {
      MemoryCategoryScope cat(prof::MemCategory::Input);
      feeder_->to_device(b, x, y);
    }
    const bool last = k == accum - 1;
    if (sync_) sync_->prepare(last);
    torch::Tensor loss;
    {
      prof::PhaseScope fwd_scope(prof::Phase::Forward);
      MemoryCategoryScope cat(prof::MemCategory::Activation);
      phase_ = "forward";
      AutocastScope autocast(o_.amp == Amp::Bf16);
      loss = model_->loss(forward(x), y);
    }
    const int64_t t_bwd = monotonic_ns();
    {
      prof::PhaseScope bwd_scope(prof::Phase::Backward);
      MemoryCategoryScope cat(prof::MemCategory::Activation);  // Note [Memory categories]
      phase_ = "backward";
      (loss / accum).backward();
    }
    t.backward_ns += monotonic_ns() - t_bwd;
    loss_sum = loss_sum.defined() ? loss_sum + loss.detach() : loss.detach();
    if (!last) {
      const int64_t now = monotonic_ns();
      t.early_micro_ns += now - t_micro;
      t_micro = now;
    }
  }
  if (sync_) {
    prof::PhaseScope comm_scope(prof::Phase::Comm);
    MemoryCategoryScope cat(prof::MemCategory::CommBuffer);
    phase_ = "communication";
    const int64_t exposed_before = sync_->stats().exposed_ns;
    sync_->finish();
    t.exposed_comm_ns += sync_->stats().exposed_ns - exposed_before;
  }
  {
    prof::PhaseScope opt_scope(prof::Phase::Optimizer);
    MemoryCategoryScope cat(prof::MemCategory::OptimizerState);
    phase_ = "optimizer";
    opt_->step();
    if (sync_) sync_->zero_grad();
  }
  const double loss = loss_sum.item<double>() / accum;
  t.last_micro_ns += monotonic_ns() - t_micro;
  phase_ = "idle";
  return loss;
}

torch::Tensor TrainSession::forward(const torch::Tensor& x) {
  if (dp_devices_.empty()) return model_->forward(x);
  // Scatter the batch along dim 0, replicate the model, run the replicas in threads, gather the
  // logits on this session's device; backward reduces the replicas' gradients into the model's.
  return torch::nn::parallel::data_parallel(model_, x, dp_devices_, dev_, 0);
}

void TrainSession::abandon_step() {
  if (sync_) sync_->abandon();
  else opt_->zero_grad();
}

namespace {

std::vector<torch::Tensor> state_tensors(ModelImpl& model, const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> all;
  for (const auto& p : params) all.push_back(p.detach());
  for (auto& b : model.buffers()) all.push_back(b);
  return all;
}

}  // namespace

TrainSession::State TrainSession::save_state() {
  State st;
  for (const auto& t : state_tensors(*model_, params_)) {
    const auto host = t.is_cuda() ? t.to(torch::kCPU).contiguous() : t.contiguous();
    st.tensors.emplace_back(static_cast<const char*>(host.data_ptr()), size_t(host.numel() * host.element_size()));
  }
  if (!opt_->state().empty()) {
    torch::serialize::OutputArchive ar;
    opt_->save(ar);
    std::ostringstream out;
    ar.save_to(out);
    st.optimizer = out.str();
  }
  return st;
}

void TrainSession::load_state(const State& st) {
  torch::NoGradGuard no_grad;
  const auto all = state_tensors(*model_, params_);
  if (all.size() != st.tensors.size()) throw std::logic_error("load_state: the model does not match the saved state");
  for (size_t i = 0; i < all.size(); ++i) {
    auto t = all[i];
    const auto& bytes = st.tensors[i];
    if (size_t(t.numel() * t.element_size()) != bytes.size() || !t.is_contiguous())
      throw std::logic_error("load_state: tensor " + std::to_string(i) + " does not match the saved state");
    if (t.is_cuda())  // from the host bytes straight into the device tensor: nothing new on the device
      t.copy_(torch::from_blob(const_cast<char*>(bytes.data()), t.sizes(), t.options().device(torch::kCPU)));
    else
      std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  }
  // Optimizer::load only adds the state it finds; state created since the copy (momentum buffers
  // of a probe's steps) must go too, or the restored optimizer differs from the saved one.
  opt_->state().clear();
  if (!st.optimizer.empty()) {
    std::istringstream in(st.optimizer);
    torch::serialize::InputArchive ar;
    ar.load_from(in);
    opt_->load(ar);
  }
}

alloc::CachingAllocator* install_allocators(const TrainOptions& o) {
  if (o.allocator != AllocatorKind::Memcomm) return nullptr;
  alloc::TorchAllocatorOptions ao;
  // On a GPU run (--device cuda, or auto with a GPU, as choose_device decides) the limit caps the
  // GPU, not host memory.
  const bool on_gpu = o.device == DeviceKind::Cuda || (o.device == DeviceKind::Auto && torch::cuda::device_count() > 0);
  ao.config.capacity = on_gpu ? 0 : static_cast<std::size_t>(o.memory_limit);
  return &alloc::install_torch_cpu_allocator(ao);
}

RankDevice choose_device(const TrainOptions& o, const DistEnv& env) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(o.threads > 0 ? o.threads : std::max(1, hw / std::max(1, env.local_world)));
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (o.device == DeviceKind::Cuda && gpus == 0) throw UsageError("--device cuda: no GPU is visible to this process");
  const bool use_cuda = o.device == DeviceKind::Cuda || (o.device == DeviceKind::Auto && gpus > 0);
  RankDevice r;
  r.device = use_cuda ? torch::Device(torch::kCUDA, env.local_rank % gpus) : torch::Device(torch::kCPU);
  r.backend = o.backend;
  // NCCL needs one GPU per rank; ranks that share a GPU (or run on the CPU) use Gloo.
  if (r.backend == Backend::Auto) r.backend = (use_cuda && env.local_world <= gpus) ? Backend::Nccl : Backend::Gloo;
  if (r.backend == Backend::Nccl && !use_cuda) throw UsageError("--backend nccl needs GPUs; this run is on the CPU");
  if (o.amp != Amp::None && !use_cuda) throw UsageError("--amp bf16 needs a GPU; this run is on the CPU");
  apply_memory_limit(r.device, o.memory_limit);
  return r;
}

int64_t free_device_memory(const torch::Device& dev) {
#ifdef MEMCOMM_TRAINER_CUDA
  if (dev.is_cuda()) {
    size_t free_b = 0, total_b = 0;
    c10::cuda::CUDAGuard guard(dev.index());
    C10_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return static_cast<int64_t>(free_b);
  }
#endif
  (void)dev;
  return 0;
}

void apply_memory_limit(const torch::Device& dev, int64_t limit) {
  if (!dev.is_cuda() || limit <= 0) return;  // the CPU cap is the allocator's (install_allocators)
#ifdef MEMCOMM_TRAINER_CUDA
  size_t free_b = 0, total_b = 0;
  c10::cuda::CUDAGuard guard(dev.index());
  C10_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (static_cast<size_t>(limit) > total_b)
    throw UsageError("--memory-limit is larger than the GPU's " + std::to_string(total_b >> 20) + " MiB");
  c10::cuda::CUDACachingAllocator::setMemoryFraction(double(limit) / double(total_b), dev.index());
#endif
}

MemoryFigures memory_figures(const torch::Device& dev, alloc::CachingAllocator* cpu_alloc) {
  MemoryFigures f;
#ifdef MEMCOMM_TRAINER_CUDA
  if (dev.is_cuda()) {
    const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(dev.index());
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    f.peak_allocated = st.allocated_bytes[all].peak;
    f.peak_reserved = st.reserved_bytes[all].peak;
    f.reserved = st.reserved_bytes[all].current;
    f.allocator = "torch-cuda";
    return f;
  }
#endif
  if (!dev.is_cuda() && cpu_alloc) {
    const auto st = cpu_alloc->stats();
    f.peak_allocated = static_cast<int64_t>(st.allocated_bytes.peak);
    f.peak_reserved = static_cast<int64_t>(st.reserved_bytes.peak);
    f.limit = static_cast<int64_t>(cpu_alloc->config().capacity);
    f.reserved = static_cast<int64_t>(st.reserved_bytes.current);
    f.fragmentation = st.fragmentation();
    f.allocator = "memcomm";
  }
  return f;
}

void reset_peak_memory(const torch::Device& dev, alloc::CachingAllocator* cpu_alloc) {
#ifdef MEMCOMM_TRAINER_CUDA
  if (dev.is_cuda()) return c10::cuda::CUDACachingAllocator::resetPeakStats(dev.index());
#endif
  if (cpu_alloc) cpu_alloc->reset_peak_stats();
}

void release_cached_memory(const torch::Device& dev, alloc::CachingAllocator* cpu_alloc) {
#ifdef MEMCOMM_TRAINER_CUDA
  if (dev.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  (void)dev;
  if (cpu_alloc) cpu_alloc->empty_cache();
}

// Note [Evaluation fails together]: a rank whose evaluation fails (out of memory under a cap, a
// bad sample) still joins the closing all-reduces, after its loader and batches are gone, so its
// peers are not left waiting; then every rank throws, the failing one its own error and the others
// one that names it (and says "out of memory" when that is what it was).
EvalResult evaluate(ModelImpl& model, const TrainOptions& o, const DistEnv& env, Communicator& comm,
                    const torch::Device& dev) {
  torch::NoGradGuard no_grad;
  MemoryCategoryScope cat(prof::MemCategory::Activation);
  model.eval();
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
  std::exception_ptr failure;
  double failure_code = 0;  // 1: an error, 2: out of memory
  try {
    auto test = make_dataset(o, "test");
    LoaderOptions lo;
    lo.keep_partial = true;  // no gradients here: a short last batch is fine, and every sample counts
    BatchLoader loader(test, strided_shard(test->size(), env.rank, env.world), o.batch_size, o.workers, o.prefetch,
                       dev.is_cuda(), lo);
    Batch b;
    for (int64_t i = 0; loader.next(b); ++i) {
      if (o.eval_batches > 0 && i >= o.eval_batches) break;
      auto x = b.inputs.to(dev, true), y = b.targets.to(dev, true);
      auto logits = model.forward(x);
      loss_sum += model.loss(logits, y).item<double>() * static_cast<double>(model.predictions(y));
      correct += model.correct(logits, y);
      count += model.predictions(y);
    }
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    failure = std::current_exception();
    const bool oom = dynamic_cast<const alloc::OutOfMemory*>(&e) || dynamic_cast<const c10::OutOfMemoryError*>(&e) ||
                     std::string(e.what()).find("out of memory") != std::string::npos;
    failure_code = oom ? 2 : 1;
  }
  auto totals = torch::tensor({loss_sum, static_cast<double>(correct), static_cast<double>(count)}, torch::kFloat64);
  comm.allreduce(totals);
  auto failed = torch::tensor({failure_code, failure_code > 0 ? double(env.world - env.rank) : 0.0}, torch::kFloat64);
  comm.allreduce(failed, -1, Reduce::Max);
  model.train();
  if (failure) std::rethrow_exception(failure);
  if (failed[0].item<double>() > 0) {
    const int who = env.world - static_cast<int>(failed[1].item<double>());
    throw std::runtime_error("rank " + std::to_string(who) +
                             (failed[0].item<double>() > 1 ? " ran out of memory in the evaluation pass"
                                                           : " failed in the evaluation pass"));
  }
  EvalResult e;
  e.samples = static_cast<int64_t>(totals[2].item<double>());
  if (e.samples == 0)
    throw std::runtime_error("evaluation scored no sample: the test split of " +
                             std::string(to_string(resolved_dataset(o))) + " is empty");
  e.loss = totals[0].item<double>() / static_cast<double>(e.samples);
  e.accuracy = totals[1].item<double>() / static_cast<double>(e.samples);
  return e;
}

uint64_t parameter_checksum(const std::vector<torch::Tensor>& params) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& p : params) {
    auto c = p.detach().to(torch::kCPU).contiguous();
    const auto* b = static_cast<const unsigned char*>(c.data_ptr());
    for (int64_t i = 0; i < c.numel() * c.element_size(); ++i) h = (h ^ b[i]) * 1099511628211ULL;
  }
  return h;
}

}  // namespace memcomm::train
