// The memory one rank's tensors live in, behind one object: which allocator serves the training
// device, its cap, its figures (peaks, reserved bytes, fragmentation) and giving its cache back.
// Free of LibTorch's heavy headers (c10's Device only).
#pragma once

#include <memcomm/train/options.hpp>

#include <c10/core/Device.h>

#include <cstdint>
#include <exception>
#include <string>

namespace memcomm::alloc {
class CachingAllocator;
}

namespace memcomm::train {

// Whether `e` is an out-of-memory: memcomm's allocator's, c10's (a CUDA caching allocator's), or a
// failure whose message says so (is_oom_message: cuBLAS's and cuDNN's in disguise, the CPU's).
bool is_out_of_memory(const std::exception& e);

// What `e` says for a person: a c10::Error's message without the C++ backtrace c10 appends to what().
std::string error_message(const std::exception& e);

// Memory figures of the allocator serving the device: memcomm's on the CPU, PyTorch's on a GPU.
struct MemoryFigures {
  int64_t peak_allocated = -1, peak_reserved = -1;  // bytes since DeviceMemory::reset_peaks(); -1: unknown
  int64_t limit = 0;                                // the cap in force; 0: none
  int64_t reserved = -1;                            // bytes reserved now; -1: unknown
  double fragmentation = -1;                        // memcomm's external fragmentation now; -1: unknown
  const char* allocator = "torch";                  // whose figures: memcomm (CPU), torch-cuda, or torch (none)
};

// Note [Whose memory]: the tensors of a CPU run live in memcomm's caching allocator (--allocator
// memcomm, installed as LibTorch's CPU allocator and capped by --memory-limit) or in LibTorch's own,
// which keeps no statistics; those of a GPU run in PyTorch's CUDA caching allocator, capped through
// its per-process memory fraction (memcomm's CPU allocator, when installed, then serves host tensors
// uncapped). DeviceMemory is the one place that knows which: the trainer, the tuner's probes and
// the session ask it, never the allocators themselves.
class DeviceMemory {
 public:
  // Installs memcomm's CPU allocator under --allocator memcomm, so construct it before the first
  // tensor of the run; caps the device at --memory-limit (UsageError when a GPU is smaller).
  DeviceMemory(const TrainOptions& o, const c10::Device& device);
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  const c10::Device& device() const { return device_; }
  // memcomm's CPU allocator, for the profiler to observe; null under --allocator torch.
  alloc::CachingAllocator* cpu_allocator() const { return cpu_alloc_; }

  // On a GPU: caps PyTorch's CUDA caching allocator on `gpu` at `bytes` (0: no cap); UsageError when
  // the GPU is smaller. Nothing on the CPU, whose cap was set when the allocator was installed.
  // `gpu` is this rank's device, or under --mode dp another replica's.
  static void cap_gpu(const c10::Device& gpu, int64_t bytes);
  // Bytes free on the device now (cudaMemGetInfo); 0 on the CPU.
  int64_t free_bytes() const;

  MemoryFigures figures() const;
  void reset_peaks();
  // Gives the allocator's free cached segments back (torch.cuda.empty_cache() on a GPU).
  void release_cache();

 private:
  c10::Device device_;
  alloc::CachingAllocator* cpu_alloc_ = nullptr;
};

}  // namespace memcomm::train
