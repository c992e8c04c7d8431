// Memory events for torch.profiler, shared by the CPU and CUDA adapters.
//
// Note [Memory events for torch.profiler]: torch.profiler(profile_memory=True) learns of each
// allocation and free from the allocator itself (c10::reportMemoryUsageToProfiler), as torch's own
// CPU and CUDA allocators report them; an allocator that does not is invisible to it (under
// memcomm's CPU allocator a profile recorded no memory at all, and memcomm-trace read no [memory]
// events from it). The adapters report the block's bytes (a free, minus them) and the engine's
// allocated and reserved bytes after the change, as torch's CUDA allocator does, and only while a
// profile records memory: the check is a thread-local read.
#pragma once

#include "memcomm/allocator/caching_allocator.hpp"

#include <c10/core/Allocator.h>

#include <cstdint>

namespace memcomm::alloc {

inline void report_to_torch_profiler(const CachingAllocator& engine, void* ptr, std::int64_t bytes, c10::Device device) {
  const DeviceStats s = engine.stats();
  c10::reportMemoryUsageToProfiler(ptr, bytes, static_cast<std::size_t>(s.allocated_bytes.current),
                                   static_cast<std::size_t>(s.reserved_bytes.current), device);
}

// Frees `ptr` through `engine`, reporting the free while a profile records memory.
inline void deallocate_reported(CachingAllocator& engine, void* ptr, c10::Device device) {
  if (!ptr || !c10::memoryProfilingEnabled()) return engine.deallocate(ptr);
  const auto bytes = static_cast<std::int64_t>(engine.block_size(ptr));
  engine.deallocate(ptr);
  report_to_torch_profiler(engine, ptr, -bytes, device);
}

// Reports an allocation `engine` just made, while a profile records memory.
inline void report_allocation(const CachingAllocator& engine, void* ptr, c10::Device device) {
  if (ptr && c10::memoryProfilingEnabled())
    report_to_torch_profiler(engine, ptr, static_cast<std::int64_t>(engine.block_size(ptr)), device);
}

}  // namespace memcomm::alloc
