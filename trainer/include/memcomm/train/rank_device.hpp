// Where one rank computes (--device, --threads) and over which collective backend (--backend).
// Free of LibTorch's heavy headers (c10's Device only).
#pragma once

#include <memcomm/train/launch.hpp>
#include <memcomm/train/options.hpp>

#include <c10/core/Device.h>

namespace memcomm::train {

struct RankDevice {
  c10::Device device{c10::kCPU};
  Backend backend = Backend::Gloo;  // Gloo or Nccl, never Auto
};

// Sets this rank's intra-op threads and picks its device and backend: a GPU when --device asks or
// auto finds one (local rank modulo the GPUs), NCCL under auto when every local rank has its own
// GPU. UsageError for a combination that cannot work here. Creates no tensor, so it may run before
// DeviceMemory installs the CPU allocator.
RankDevice choose_device(const TrainOptions& o, const DistEnv& env);

}  // namespace memcomm::train
