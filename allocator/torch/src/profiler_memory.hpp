// Memory events for torch.profiler, shared by the CPU and CUDA adapters.
//
// Note [Memory events for torch.profiler]: torch.profiler(profile_memory=True) learns of each
// allocation and free from the allocator itself (c10::reportMemoryUsageToProfiler), as torch's own
// CPU and CUDA allocators report them; an allocator that does not is invisible to it (under
// memcomm's CPU allocator a profile recorded no memory at all, and memcomm-trace read no [memory]
// events from it). Each adapter reports what torch's allocator for its device reports, so a profile
// reads alike under either: the CPU's the bytes asked for (a free, minus them) and their total; CUDA's
// the block's bytes and the allocated total in blocks (its caching allocator's). Reserved is the
// engine's backed bytes. Only while a profile records memory: the check is a thread-local read.
// Unlike torch's CPU allocator, which knows only what it allocated while profiling, frees of blocks
// allocated before the profile are reported too.
#pragma once

#include "memcomm/allocator/caching_allocator.hpp"

#include <c10/core/Allocator.h>

#include <cstdint>

namespace memcomm::alloc {

// Which bytes an adapter reports (Note [Memory events for torch.profiler]).
enum class ReportedBytes { Requested, Blocks };

inline std::int64_t reported_size(const CachingAllocator& engine, const void* ptr, ReportedBytes what) {
  return static_cast<std::int64_t>(what == ReportedBytes::Requested ? engine.requested_size(ptr) : engine.block_size(ptr));
}

inline void report_to_torch_profiler(const CachingAllocator& engine, void* ptr, std::int64_t bytes, c10::Device device,
                                     ReportedBytes what) {
  const DeviceStats s = engine.stats();
  const Stat& allocated = what == ReportedBytes::Requested ? s.requested_bytes : s.allocated_bytes;
  c10::reportMemoryUsageToProfiler(ptr, bytes, static_cast<std::size_t>(allocated.current),
                                   static_cast<std::size_t>(s.reserved_bytes.current), device);
}

// Frees `ptr` through `engine`, reporting the free while a profile records memory.
inline void deallocate_reported(CachingAllocator& engine, void* ptr, c10::Device device, ReportedBytes what) {
  if (!ptr || !c10::memoryProfilingEnabled()) return engine.deallocate(ptr);
  const std::int64_t bytes = reported_size(engine, ptr, what);
  engine.deallocate(ptr);
  report_to_torch_profiler(engine, ptr, -bytes, device, what);
}

// Reports an allocation `engine` just made, while a profile records memory.
inline void report_allocation(const CachingAllocator& engine, void* ptr, c10::Device device, ReportedBytes what) {
  if (ptr && c10::memoryProfilingEnabled()) report_to_torch_profiler(engine, ptr, reported_size(engine, ptr, what), device, what);
}

}  // namespace memcomm::alloc
