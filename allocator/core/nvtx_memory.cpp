// Note [NVTX memory regions]
// NVTX's memory API describes sub-allocation to tools: a heap is a range the process owns (here a
// segment: a whole cudaMalloc'd segment or an expandable segment's virtual reservation), and regions
// are what a sub-allocator hands out of it (here each block, sized as the user asked, so an access
// past the requested bytes is reported even when the rounded block would hide it). With a tool
// attached, compute-sanitizer checks accesses against regions instead of against whole segments, and
// Nsight Systems shows the allocator's heaps. Mapping and unmapping pages inside a reservation need
// no calls: the heap is the reservation and the regions are what is live in it. A block is
// unregistered when the user frees it (free_requested), not when its stream events complete: from
// then on, touching it is the user's bug.
#include "memcomm/allocator/nvtx_memory.hpp"

#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>

#include <cstdlib>

namespace memcomm::alloc {

namespace {

nvtxDomainHandle_t as_domain(void* d) { return static_cast<nvtxDomainHandle_t>(d); }

}  // namespace

bool nvtx_tool_attached() {
  const char* path = std::getenv("NVTX_INJECTION64_PATH");
  return path != nullptr && *path != '\0';
}

NvtxMemoryObserver::NvtxMemoryObserver(const char* domain) : domain_(nvtxDomainCreateA(domain)) {}

NvtxMemoryObserver::~NvtxMemoryObserver() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [base, heap] : heaps_) nvtxMemHeapUnregister(as_domain(domain_), static_cast<nvtxMemHeapHandle_t>(heap.handle));
  heaps_.clear();
  nvtxDomainDestroy(as_domain(domain_));
}

std::size_t NvtxMemoryObserver::heaps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return heaps_.size();
}

std::size_t NvtxMemoryObserver::regions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return regions_.size();
}

void NvtxMemoryObserver::on_event(const AllocEvent& e) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    switch (e.kind) {
      case EventKind::SegmentAlloc: {
        nvtxMemVirtualRangeDesc_t range{};
        range.ptr = reinterpret_cast<const void*>(e.address);
        range.size = e.size;
        nvtxMemHeapDesc_t desc{};
        desc.extCompatID = NVTX_EXT_COMPATID_MEM;
        desc.structSize = sizeof(desc);
        desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
        desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
        desc.typeSpecificDescSize = sizeof(range);
        desc.typeSpecificDesc = &range;
        desc.messageType = NVTX_MESSAGE_TYPE_ASCII;
        desc.message.ascii = "memcomm segment";
        auto old = heaps_.find(e.address);  // a segment_free we did not see: drop the stale heap first
        if (old != heaps_.end())
          nvtxMemHeapUnregister(as_domain(domain_), static_cast<nvtxMemHeapHandle_t>(old->second.handle));
        heaps_[e.address] = Heap{e.size, nvtxMemHeapRegister(as_domain(domain_), &desc)};
        break;
      }
      case EventKind::SegmentFree: {
        auto it = heaps_.find(e.address);
        if (it == heaps_.end()) break;
        nvtxMemHeapUnregister(as_domain(domain_), static_cast<nvtxMemHeapHandle_t>(it->second.handle));
        // Unregistering a heap drops its regions with it.
        regions_.erase(regions_.lower_bound(it->first), regions_.lower_bound(it->first + it->second.size));
        heaps_.erase(it);
        break;
      }
      case EventKind::Alloc: {
        auto it = heaps_.upper_bound(e.address);  // the segment starting at or before the block
        if (it == heaps_.begin()) break;          // its segment_alloc came before we subscribed
        --it;
        if (e.address >= it->first + it->second.size) break;
        nvtxMemVirtualRangeDesc_t region{};
        region.ptr = reinterpret_cast<const void*>(e.address);
        region.size = e.requested > 0 ? e.requested : e.size;
        nvtxMemRegionsRegisterBatch_t batch{};
        batch.extCompatID = NVTX_EXT_COMPATID_MEM;
        batch.structSize = sizeof(batch);
        batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
        batch.heap = static_cast<nvtxMemHeapHandle_t>(it->second.handle);
        batch.regionCount = 1;
        batch.regionDescElementSize = sizeof(region);
        batch.regionDescElements = &region;
        nvtxMemRegionsRegister(as_domain(domain_), &batch);
        regions_.insert(e.address);
        break;
      }
      case EventKind::FreeRequested: {
        if (regions_.erase(e.address) == 0) break;  // never registered (outside every heap we know)
        nvtxMemRegionRef_t ref{};
        ref.pointer = reinterpret_cast<const void*>(e.address);
        nvtxMemRegionsUnregisterBatch_t batch{};
        batch.extCompatID = NVTX_EXT_COMPATID_MEM;
        batch.structSize = sizeof(batch);
        batch.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
        batch.refCount = 1;
        batch.refElementSize = sizeof(ref);
        batch.refElements = &ref;
        nvtxMemRegionsUnregister(as_domain(domain_), &batch);
        break;
      }
      default:
        break;
    }
  } catch (...) {
    // An observer must not throw into the allocator; a failed map insert only loses tool information.
  }
}

}  // namespace memcomm::alloc
