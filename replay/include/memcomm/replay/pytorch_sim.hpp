// A simulation of PyTorch 2.x's CUDACachingAllocator (DeviceCachingAllocator), default policy and
// expandable segments, over fake addresses. Algorithm in Note [PyTorch simulation] in pytorch_sim.cpp.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>

#include "memcomm/replay/policy.hpp"

namespace memcomm::replay {

struct PyTorchSimConfig {
  std::uint64_t capacity = 0;  // bytes cudaMalloc/cuMemCreate can get at most; 0 = unlimited
  // PYTORCH_CUDA_ALLOC_CONF max_split_size_mb (bytes); max() = unlimited, PyTorch's default.
  std::uint64_t max_split_size = std::numeric_limits<std::uint64_t>::max();
  bool expandable_segments = false;  // expandable_segments:True
};

std::unique_ptr<Policy> make_pytorch_sim(const PyTorchSimConfig& config);

}  // namespace memcomm::replay
