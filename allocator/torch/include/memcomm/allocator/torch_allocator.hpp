// memcomm's allocator as LibTorch's allocator. The two lines that switch a LibTorch program over:
//
//   #include <memcomm/allocator/torch_allocator.hpp>
//   memcomm::alloc::install_torch_cpu_allocator();   // before the tensors you want it to serve
//
// Every CPU tensor allocated afterwards lives in memcomm's caching allocator (host source: pages
// mapped into growing virtual ranges); tensors allocated earlier keep their own deleter and free
// correctly. Stats: memcomm::alloc::torch_cpu_allocator()->stats().
//
// This header does not include LibTorch, so callers that only read stats compile fast.
#pragma once

#include "memcomm/allocator/caching_allocator.hpp"
#include "memcomm/allocator/observer.hpp"

#include <string>

namespace memcomm::alloc {

struct TorchAllocatorOptions {
  AllocatorConfig config;            // policy knobs (capacity = the memory cap; 0 = none)
  std::string source = "host";       // memory source behind the CPU allocator: "host" or "simulated" is not usable
  // Memory source behind the CUDA allocator: "auto" (cuda-vmm where the driver supports virtual
  // memory management, else cuda), "cuda-vmm" or "cuda"; "simulated" (one device, fake addresses,
  // capacity = config.capacity) tests the adapter without a GPU and can hold no tensor.
  // Ignored by install_torch_cpu_allocator().
  std::string cuda_source = "auto";
  // Added to every engine the adapter creates, before its first event (the Python package's
  // history for snapshots). Must outlive the process's allocations: the engines are never destroyed.
  Observer* observer = nullptr;
};

// Installs memcomm's caching allocator as LibTorch's CPU allocator (c10::SetAllocator with a
// priority above the default) and returns it. Calling it again returns the installed allocator
// unchanged. Blocks are at least 64-byte aligned, as LibTorch's own CPU allocator guarantees.
CachingAllocator& install_torch_cpu_allocator(const TorchAllocatorOptions& options = {});

// The installed CPU allocator, or nullptr when install_torch_cpu_allocator() was not called.
CachingAllocator* torch_cpu_allocator();

// Installs memcomm's caching allocator as torch's CUDA allocator (c10::cuda::CUDACachingAllocator::
// allocator and c10::SetAllocator(kCUDA)): one engine per GPU, created on its first allocation, on
// options.cuda_source, with cudaEvent streams; tensors are allocated on c10's current stream.
// Call it before the first CUDA allocation of the process: installing once torch's own allocator has
// allocated CUDA memory throws std::logic_error (its blocks could not be freed through ours). Calling
// it again is a no-op. Throws memcomm::alloc::SourceError when there is no usable GPU. Only in builds
// with CUDA (MEMCOMM_HAVE_CUDA); CUDA graph private pools and IPC are not supported (see
// Note [What the CUDA adapter does not do] in torch_cuda_allocator.cpp).
void install_torch_cuda_allocator(const TorchAllocatorOptions& options = {});

// The engine serving `device` once the CUDA allocator is installed and the device has allocated;
// nullptr before that. Stats: torch_cuda_allocator(0)->stats() (or torch's own
// c10::cuda::CUDACachingAllocator::getDeviceStats, which the adapter fills from the same figures).
CachingAllocator* torch_cuda_allocator(int device);

}  // namespace memcomm::alloc
