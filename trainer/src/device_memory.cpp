// DeviceMemory: memcomm's CPU allocator or PyTorch's CUDA caching allocator, whichever serves the
// device (Note [Whose memory] in device_memory.hpp).
#include <memcomm/train/device_memory.hpp>

#include <memcomm/train/errors.hpp>

#if __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#define MEMCOMM_TRAINER_CUDA 1
#endif
#include <memcomm/allocator/caching_allocator.hpp>
#include <memcomm/allocator/torch_allocator.hpp>
#include <memcomm/common/oom_message.hpp>

#include <c10/util/Exception.h>

#include <cstddef>
#include <string>

namespace memcomm::train {

bool is_out_of_memory(const std::exception& e) {
  return dynamic_cast<const alloc::OutOfMemory*>(&e) || dynamic_cast<const c10::OutOfMemoryError*>(&e) ||
         is_oom_message(e.what());
}

std::string error_message(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  return c10_error ? c10_error->what_without_backtrace() : e.what();
}

DeviceMemory::DeviceMemory(const TrainOptions& o, const c10::Device& device) : device_(device) {
  if (o.allocator == AllocatorKind::Memcomm) {
    alloc::TorchAllocatorOptions ao;
    // On a GPU run the limit caps the GPU, not host memory.
    ao.config.capacity = device.is_cuda() ? 0 : static_cast<std::size_t>(o.memory_limit);
    cpu_alloc_ = &alloc::install_torch_cpu_allocator(ao);
  }
  cap_gpu(device, o.memory_limit);
}

void DeviceMemory::cap_gpu(const c10::Device& gpu, int64_t bytes) {
  if (!gpu.is_cuda() || bytes <= 0) return;  // the CPU cap is the allocator's (the constructor's)
#ifdef MEMCOMM_TRAINER_CUDA
  size_t free_b = 0, total_b = 0;
  c10::cuda::CUDAGuard guard(gpu.index());
  C10_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (static_cast<size_t>(bytes) > total_b)
    throw UsageError("--memory-limit is larger than the GPU's " + std::to_string(total_b >> 20) + " MiB");
  c10::cuda::CUDACachingAllocator::setMemoryFraction(double(bytes) / double(total_b), gpu.index());
#endif
}

int64_t DeviceMemory::free_bytes() const {
#ifdef MEMCOMM_TRAINER_CUDA
  if (device_.is_cuda()) {
    size_t free_b = 0, total_b = 0;
    c10::cuda::CUDAGuard guard(device_.index());
    C10_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return static_cast<int64_t>(free_b);
  }
#endif
  return 0;
}

MemoryFigures DeviceMemory::figures() const {
  MemoryFigures f;
#ifdef MEMCOMM_TRAINER_CUDA
  if (device_.is_cuda()) {
    const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    f.peak_allocated = st.allocated_bytes[all].peak;
    f.peak_reserved = st.reserved_bytes[all].peak;
    f.reserved = st.reserved_bytes[all].current;
    f.allocator = "torch-cuda";
    return f;
  }
#endif
  if (!device_.is_cuda() && cpu_alloc_) {
    const auto st = cpu_alloc_->stats();
    f.peak_allocated = static_cast<int64_t>(st.allocated_bytes.peak);
    f.peak_reserved = static_cast<int64_t>(st.reserved_bytes.peak);
    f.limit = static_cast<int64_t>(cpu_alloc_->config().capacity);
    f.reserved = static_cast<int64_t>(st.reserved_bytes.current);
    f.fragmentation = st.fragmentation();
    f.allocator = "memcomm";
  }
  return f;
}

void DeviceMemory::reset_peaks() {
#ifdef MEMCOMM_TRAINER_CUDA
  if (device_.is_cuda()) return c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
#endif
  if (cpu_alloc_) cpu_alloc_->reset_peak_stats();
}

void DeviceMemory::release_cache() {
#ifdef MEMCOMM_TRAINER_CUDA
  if (device_.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  if (cpu_alloc_) cpu_alloc_->empty_cache();
}

}  // namespace memcomm::train
