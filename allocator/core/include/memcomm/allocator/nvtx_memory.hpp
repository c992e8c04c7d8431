// NvtxMemoryObserver: tells NVTX's memory API what the caching allocator hands out, so tools that
// read it (compute-sanitizer's memcheck, Nsight Systems) see each tensor as its own region instead
// of one big cudaMalloc'd or VMM-mapped range (Note [NVTX memory regions] in nvtx_memory.cpp).
//
//   alloc::NvtxMemoryObserver nvtx;          // outlives the subscription
//   engine.add_observer(&nvtx);
//
// Built with the CUDA parts (NVTX3 is header-only). Without a tool attached every call returns at
// once, but the observer still keeps its segment table: subscribe it only when a tool is present
// (nvtx_tool_attached()), as the LibTorch CUDA adapter does.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>

#include "memcomm/allocator/observer.hpp"

namespace memcomm::alloc {

// True when an NVTX tool is injected into this process (NVTX_INJECTION64_PATH is set, which is how
// Nsight Systems and compute-sanitizer attach).
bool nvtx_tool_attached();

class NvtxMemoryObserver final : public Observer {
 public:
  explicit NvtxMemoryObserver(const char* domain = "memcomm");
  ~NvtxMemoryObserver() override;  // unregisters the heaps still registered
  NvtxMemoryObserver(const NvtxMemoryObserver&) = delete;
  NvtxMemoryObserver& operator=(const NvtxMemoryObserver&) = delete;

  void on_event(const AllocEvent& event) noexcept override;

  // Segments registered as heaps, and blocks as regions, now (for tests).
  std::size_t heaps() const;
  std::size_t regions() const;

 private:
  struct Heap {
    std::uint64_t size;  // bytes of the segment (the whole virtual range for expandable segments)
    void* handle;        // nvtxMemHeapHandle_t
  };
  void* domain_;                               // nvtxDomainHandle_t
  mutable std::mutex mu_;                      // heaps_ (events come from any allocating thread)
  std::map<std::uint64_t, Heap> heaps_;        // by segment base address
  std::set<std::uint64_t> regions_;            // registered block addresses (only these are unregistered)
};

}  // namespace memcomm::alloc
