// choose_device: the rank's device and collective backend from --device, --backend and the GPUs
// this process sees.
#include <memcomm/train/rank_device.hpp>

#include <memcomm/train/errors.hpp>

#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <algorithm>
#include <thread>

namespace memcomm::train {

RankDevice choose_device(const TrainOptions& o, const DistEnv& env) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(o.threads > 0 ? o.threads : std::max(1, hw / std::max(1, env.local_world)));
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (o.device == DeviceKind::Cuda && gpus == 0) throw UsageError("--device cuda: no GPU is visible to this process");
  const bool use_cuda = o.device == DeviceKind::Cuda || (o.device == DeviceKind::Auto && gpus > 0);
  RankDevice r;
  r.device = use_cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank % gpus))
                      : c10::Device(c10::kCPU);
  r.backend = o.backend;
  // NCCL needs one GPU per rank; ranks that share a GPU (or run on the CPU) use Gloo.
  if (r.backend == Backend::Auto) r.backend = (use_cuda && env.local_world <= gpus) ? Backend::Nccl : Backend::Gloo;
  if (r.backend == Backend::Nccl && !use_cuda) throw UsageError("--backend nccl needs GPUs; this run is on the CPU");
  if (o.amp != Amp::None && !use_cuda) throw UsageError("--amp bf16 needs a GPU; this run is on the CPU");
  return r;
}

}  // namespace memcomm::train
