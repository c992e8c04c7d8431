// memcomm's allocator as LibTorch's allocator. The two lines that switch a LibTorch program over:
//
//   #include <memcomm/allocator/torch_allocator.hpp>
//   memcomm::alloc::install_torch_cpu_allocator();   // before the tensors you want it to serve
//
// Every CPU tensor allocated afterwards lives in memcomm's caching allocator (host source: memfd
// pages in growing virtual ranges); tensors allocated earlier keep their own deleter and free
// correctly. Stats: memcomm::alloc::torch_cpu_allocator()->stats().
//
// This header does not include LibTorch, so callers that only read stats compile fast.
#pragma once

#include "memcomm/allocator/caching_allocator.hpp"

#include <string>

namespace memcomm::alloc {

struct TorchAllocatorOptions {
  AllocatorConfig config;            // policy knobs (capacity = the memory cap; 0 = none)
  std::string source = "host";       // memory source behind the CPU allocator: "host" or "simulated" is not usable
};

// Installs memcomm's caching allocator as LibTorch's CPU allocator (c10::SetAllocator with a
// priority above the default) and returns it. Calling it again returns the installed allocator
// unchanged. Blocks are at least 64-byte aligned, as LibTorch's own CPU allocator guarantees.
CachingAllocator& install_torch_cpu_allocator(const TorchAllocatorOptions& options = {});

// The installed CPU allocator, or nullptr when install_torch_cpu_allocator() was not called.
CachingAllocator* torch_cpu_allocator();

}  // namespace memcomm::alloc
