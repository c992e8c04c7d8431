// The memory sources that need no GPU: "host" and "simulated" (CUDA ones: cuda_sources.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "memcomm/allocator/memory_source.hpp"

namespace memcomm::alloc {

// Host memory: reserve() takes PROT_NONE address space, map() backs pages with fresh private anonymous
// memory (MAP_FIXED over the reservation) and unmap() puts PROT_NONE back over them, so the kernel
// really gets them back; a forked child sees them copy-on-write (Note [Host pages across fork]). allocate() is reserve + map in one. Granularity is 2 MiB by default
// (a multiple of the OS page size), so host segments behave like CUDA's.
class HostSource final : public MemorySource {
 public:
  explicit HostSource(const SourceOptions& options = {});
  const char* name() const override { return "host"; }
  std::size_t granularity() const override { return granularity_; }
  std::size_t capacity() const override { return capacity_; }
  bool can_map() const override { return true; }
  bool host_accessible() const override { return true; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) override;
  void* reserve(std::size_t bytes) override;
  void release(void* base, std::size_t bytes) override;
  bool map(void* addr, std::size_t bytes) override;
  void unmap(void* addr, std::size_t bytes) override;
  SourceCounters counters() const override;

 private:
  bool map_locked(void* addr, std::size_t bytes);
  void unmap_locked(void* addr, std::size_t bytes);
  void check_inside_reservation(const char* what, void* addr, std::size_t bytes) const;  // throws SourceError
  std::size_t granularity_;                      // page size of map/unmap
  std::size_t capacity_;                         // bytes backed at most (0 = no cap)
  mutable std::mutex mu_;                        // guards the reservations and counters
  std::map<std::uintptr_t, std::size_t> reservations_;  // base -> bytes
  SourceCounters counters_;
};

// No memory at all: fake, never-dereferenced addresses from a private address space, a capacity
// (or none), and counts of every call. It checks its callers as a driver would: mapping twice,
// unmapping what is not mapped, or freeing an unknown address throws SourceError.
class SimulatedSource final : public MemorySource {
 public:
  explicit SimulatedSource(const SourceOptions& options = {});
  const char* name() const override { return "simulated"; }
  int device() const override { return device_; }
  std::size_t granularity() const override { return granularity_; }
  std::size_t capacity() const override { return capacity_; }
  bool can_map() const override { return true; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) override;
  void* reserve(std::size_t bytes) override;
  void release(void* base, std::size_t bytes) override;
  bool map(void* addr, std::size_t bytes) override;
  void unmap(void* addr, std::size_t bytes) override;
  SourceCounters counters() const override;
  // Whether [addr, addr+bytes) is entirely mapped (or inside an allocated segment).
  bool is_backed(const void* addr, std::size_t bytes) const;

 private:
  std::size_t granularity_;   // page size
  std::size_t capacity_;      // bytes backed at most (0 = no cap)
  int device_;                // reported device
  mutable std::mutex mu_;     // guards everything below
  std::uintptr_t next_ = std::uintptr_t(1) << 44;   // next fake address handed out (16 TiB up)
  std::map<std::uintptr_t, std::size_t> segments_;  // allocate()d ranges: base -> bytes
  std::map<std::uintptr_t, std::size_t> reserved_;  // reserve()d ranges: base -> bytes
  std::map<std::uintptr_t, std::size_t> mapped_;    // mapped runs: addr -> bytes (never adjacent-merged)
  SourceCounters counters_;
};

}  // namespace memcomm::alloc
