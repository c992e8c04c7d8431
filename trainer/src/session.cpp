// TrainSession: one rank's model, optimizer, gradient sync and device feed, and the optimizer step
// over them (see session.hpp).
#include <memcomm/train/session.hpp>

#include <ATen/autocast_mode.h>
#include <torch/nn/parallel/data_parallel.h>
#if __has_include(<c10/cuda/CUDAStream.h>)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#define MEMCOMM_TRAINER_CUDA 1
#endif
#include <memcomm/profiler/recorder.hpp>

#include <memcomm/train/device_memory.hpp>
#include <memcomm/train/profiling.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

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
    // See Note [Replicas for --mode dp]: every visible GPU, or the one CPU device.
    if (dev.is_cuda()) {
      for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i) {
        dp_devices_.emplace_back(torch::kCUDA, static_cast<torch::DeviceIndex>(i));
        if (i != dev.index()) DeviceMemory::cap_gpu(dp_devices_.back(), o.memory_limit);  // every replica's GPU
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

}  // namespace memcomm::train
