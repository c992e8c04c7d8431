// c10::cuda::CUDACachingAllocator::CUDAAllocator over memcomm's CachingAllocator: torch's CUDA
// tensors, raw_alloc users (cuBLAS/cuDNN workspaces) and torch.cuda memory stats all go through it.
//
// One engine per GPU, built on the GPU's first allocation (so install costs no CUDA context), over
// "cuda-vmm" where the driver supports virtual memory management (expandable segments), else
// "cuda"; its StreamModel is make_cuda_streams(), and every block belongs to c10's current stream
// at allocation time, so the engine's stream-ordered reuse plays the role of PyTorch's per-stream
// pools, and recordStream() its cudaEvent-based cross-stream safety.
//
// Note [Adapter lifetime] (torch_cpu_allocator.cpp) holds here too: the adapter and its engines are
// never destroyed, because torch frees CUDA tensors during static destruction.
//
// Note [Which engine frees a pointer]: a DataPtr deleter receives only the pointer. The first GPU
// that allocates is the "home" device and its blocks are found without any lookup; blocks of other
// GPUs are recorded in a locked map, consulted only while the map is non-empty. Single-GPU
// processes (one per rank in data-parallel training) thus free with no extra lock.
//
// Note [What the CUDA adapter does not do]: CUDA graph private pools (torch.cuda.graph, MemPool,
// checkpointed pool state), CUDA IPC (torch.multiprocessing sharing of CUDA tensors), memory history
// with stack traces (torch.cuda.memory._record_memory_history; subscribe a memcomm Observer
// instead), disabling the allocator, and changing the memory fraction after a GPU has allocated all
// fail with a TORCH_CHECK error naming memcomm's allocator. Allocator trace trackers do work: every
// engine event is forwarded to them as a c10 TraceEntry.
//
// When an NVTX tool is attached (Nsight Systems, compute-sanitizer), every engine also reports its
// segments and blocks through NVTX's memory API (Note [NVTX memory regions] in nvtx_memory.cpp).
//
// Note [Simulated CUDA adapter]: with cuda_source "simulated" the adapter serves one device from the
// simulated source (fake addresses, nothing touched) with immediate streams, and never asks CUDA for
// the current device or stream (device 0, stream 0 unless raw_alloc_with_stream names one). No
// tensor can live there; it exists so that the adapter's bookkeeping (stats, snapshot, OOM, trace
// trackers, frees) is tested through torch's own entry points on machines without a GPU.
#include "memcomm/allocator/torch_allocator.hpp"

#include "memcomm/allocator/cuda_sources.hpp"
#include "memcomm/allocator/nvtx_memory.hpp"
#include "profiler_memory.hpp"

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace memcomm::alloc {

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::CachingDeviceAllocator::DeviceStats;

// Whether `device` supports cuMemCreate/cuMemMap; false when the driver cannot be asked.
bool driver_supports_vmm(int device) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // kept open, as the cuda-vmm source does
  if (!h) return false;
  using GetAttr = CUresult (*)(int*, CUdevice_attribute, CUdevice);
  auto get_attr = reinterpret_cast<GetAttr>(dlsym(h, "cuDeviceGetAttribute"));
  int supported = 0;
  return get_attr && get_attr(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) == CUDA_SUCCESS &&
         supported != 0;
}

c10::CachingAllocator::Stat to_c10(const Stat& s, const Stat& base) {
  c10::CachingAllocator::Stat out;
  out.current = s.current;
  out.peak = s.peak;
  out.allocated = s.allocated - base.allocated;
  out.freed = s.freed - base.freed;
  return out;
}

// Our stats carry no small/large split, so only the AGGREGATE slot of c10's StatArrays is filled.
c10::CachingAllocator::StatArray to_c10_array(const Stat& s, const Stat& base) {
  c10::CachingAllocator::StatArray a{};
  a[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)] = to_c10(s, base);
  return a;
}

// Forwards engine events to torch's allocator trace trackers (same actions, same order, but OOM).
class TraceForwarder final : public Observer {
 public:
  void add(cca::AllocatorTraceTracker tracker) {
    std::lock_guard<std::mutex> lock(mu_);
    auto next = std::make_shared<std::vector<cca::AllocatorTraceTracker>>(*std::atomic_load(&trackers_));
    next->push_back(std::move(tracker));
    std::atomic_store(&trackers_, std::shared_ptr<const std::vector<cca::AllocatorTraceTracker>>(std::move(next)));
  }
  // The trace layer's allocator actions as c10's trace entries: the same eight, named alike.
  static cca::TraceEntry::Action torch_action(EventKind kind) {
    switch (kind) {
      case EventKind::Alloc: return cca::TraceEntry::ALLOC;
      case EventKind::FreeRequested: return cca::TraceEntry::FREE_REQUESTED;
      case EventKind::FreeCompleted: return cca::TraceEntry::FREE_COMPLETED;
      case EventKind::SegmentAlloc: return cca::TraceEntry::SEGMENT_ALLOC;
      case EventKind::SegmentFree: return cca::TraceEntry::SEGMENT_FREE;
      case EventKind::SegmentMap: return cca::TraceEntry::SEGMENT_MAP;
      case EventKind::SegmentUnmap: return cca::TraceEntry::SEGMENT_UNMAP;
      default: return cca::TraceEntry::OOM;  // the allocator emits no other kind (observer.hpp)
    }
  }
  void on_event(const AllocEvent& e) noexcept override {
    const auto trackers = std::atomic_load(&trackers_);
    if (trackers->empty()) return;
    const cca::TraceEntry entry(torch_action(e.kind), static_cast<c10::DeviceIndex>(e.device), e.address, e.size,
                                reinterpret_cast<void*>(e.stream), c10::MempoolId_t{0, 0}, c10::getApproximateTime());
    for (const auto& t : *trackers) {
      try {
        t(entry);
      } catch (...) {  // an observer must not throw into the allocator
      }
    }
  }

 private:
  std::mutex mu_;  // serialises add()
  std::shared_ptr<const std::vector<cca::AllocatorTraceTracker>> trackers_ =
      std::make_shared<const std::vector<cca::AllocatorTraceTracker>>();  // copy-on-write list
};

class TorchCudaAdapter;
TorchCudaAdapter* g_adapter = nullptr;  // Note [Adapter lifetime]: leaked on purpose
void free_block(void* ptr);

class TorchCudaAdapter final : public cca::CUDAAllocator {
 public:
  TorchCudaAdapter(TorchAllocatorOptions options, int devices)
      : options_(std::move(options)),
        simulated_(options_.cuda_source == "simulated"),
        devices_(devices),
        engines_(new std::atomic<CachingAllocator*>[devices]),
        fractions_(devices, 1.0),
        stat_base_(devices) {
    for (int d = 0; d < devices; ++d) engines_[d].store(nullptr);
  }

  CachingAllocator* engine_if_any(int device) const {
    return device >= 0 && device < devices_ ? engines_[device].load(std::memory_order_acquire) : nullptr;
  }

  // --- allocation ---------------------------------------------------------------------------
  c10::DataPtr allocate(size_t n) override {
    const c10::DeviceIndex device = current_device();
    void* p = n == 0 ? nullptr : alloc_on(device, n, current_stream(device));
    return {p, p, &free_block, c10::Device(c10::DeviceType::CUDA, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }
  void* raw_alloc(size_t nbytes) override {
    const c10::DeviceIndex device = current_device();
    return nbytes == 0 ? nullptr : alloc_on(device, nbytes, current_stream(device));
  }
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override {
    return nbytes == 0 ? nullptr : alloc_on(current_device(), nbytes, stream);
  }
  void raw_delete(void* ptr) override { free(ptr); }

  void free(void* ptr) {
    if (!ptr) return;
    // See Note [Which engine frees a pointer].
    if (foreign_live_.load(std::memory_order_acquire) > 0) {
      std::lock_guard<std::mutex> lock(foreign_mu_);
      auto it = foreign_.find(ptr);
      if (it != foreign_.end()) {
        const int device = it->second;
        foreign_.erase(it);
        foreign_live_.fetch_sub(1, std::memory_order_release);
        deallocate_reported(*engines_[device].load(), ptr, c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)),
                            ReportedBytes::Blocks);
        return;
      }
    }
    const int home = home_.load(std::memory_order_acquire);
    TORCH_CHECK(home >= 0, "memcomm's CUDA allocator: free of ", ptr, " before any allocation");
    deallocate_reported(*engines_[home].load(), ptr, c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(home)),
                        ReportedBytes::Blocks);
  }

  // --- lifecycle ----------------------------------------------------------------------------
  void init(int device_count) override {
    TORCH_CHECK(device_count <= devices_, "memcomm's CUDA allocator was installed for ", devices_,
                " devices, torch initialises ", device_count);
  }
  bool initialized() override { return true; }
  void enable(bool value) override {
    TORCH_CHECK(value, "memcomm's CUDA allocator cannot be disabled");
  }
  bool isEnabled() const override { return true; }
  std::string name() override { return "memcomm"; }

  double getMemoryFraction(c10::DeviceIndex device) override { return fractions_.at(check(device)); }
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    TORCH_CHECK(fraction > 0 && fraction <= 1, "invalid memory fraction ", fraction, " (expected (0, 1])");
    std::lock_guard<std::mutex> lock(create_mu_);
    TORCH_CHECK(!engine_if_any(check(device)), "memcomm's CUDA allocator: setMemoryFraction on device ",
                int(device), " must come before its first allocation (the engine's cap is fixed then)");
    fractions_[device] = fraction;
  }

  // --- cache --------------------------------------------------------------------------------
  void emptyCache(c10::MempoolId_t mempool_id) override {
    no_private_pools(mempool_id, "emptyCache");
    for (int d = 0; d < devices_; ++d)
      if (auto* e = engine_if_any(d)) e->empty_cache();
  }
  void cacheInfo(c10::DeviceIndex device, size_t* largestBlock) override {
    if (*largestBlock == 0 && !simulated_) {  // as PyTorch: start from the device's free memory
      c10::cuda::CUDAGuard g(device);
      size_t total = 0;
      C10_CUDA_CHECK(cudaMemGetInfo(largestBlock, &total));
    }
    if (auto* e = engine_if_any(device))
      *largestBlock = std::max<size_t>(*largestBlock, e->memory_summary().largest_free_block);
  }
  void* getBaseAllocation(void* ptr, size_t* size) override {
    const auto a = reinterpret_cast<std::uint64_t>(ptr);
    for (int d = 0; d < devices_; ++d)
      if (auto* e = engine_if_any(d))
        for (const auto& s : e->snapshot())
          if (a >= s.base && a < s.base + s.size) {
            if (size) *size = s.size;
            return reinterpret_cast<void*>(s.base);
          }
    TORCH_CHECK(false, "memcomm's CUDA allocator: ", ptr, " is not in any of its segments");
  }
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex device) override {
    std::vector<cca::StreamSegmentSize> out;
    if (auto* e = engine_if_any(check(device)))
      for (const auto& s : e->snapshot())
        if (s.expandable) out.emplace_back(reinterpret_cast<cudaStream_t>(s.stream), s.small_pool, s.mapped_bytes);
    return out;
  }

  // --- streams ------------------------------------------------------------------------------
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    if (!ptr.get() || ptr.get_deleter() != &free_block) return;  // not ours: nothing to track, as PyTorch
    auto* e = engine_if_any(ptr.device().index());
    TORCH_CHECK(e, "memcomm's CUDA allocator: recordStream on a device it never allocated on");
    e->record_stream(ptr.get(), reinterpret_cast<StreamId>(stream.stream()));
  }

  // --- stats ------------------------------------------------------------------------------
  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    DeviceStats out;
    auto* e = engine_if_any(check(device));
    if (!e) return out;
    const alloc::DeviceStats s = e->stats();
    std::lock_guard<std::mutex> lock(stat_mu_);
    const alloc::DeviceStats& b = stat_base_[device];
    out.allocation = to_c10_array(s.allocation, b.allocation);
    out.segment = to_c10_array(s.segment, b.segment);
    out.active = to_c10_array(s.active, b.active);
    out.inactive_split = to_c10_array(s.inactive_split, b.inactive_split);
    out.allocated_bytes = to_c10_array(s.allocated_bytes, b.allocated_bytes);
    out.reserved_bytes = to_c10_array(s.reserved_bytes, b.reserved_bytes);
    out.active_bytes = to_c10_array(s.active_bytes, b.active_bytes);
    out.inactive_split_bytes = to_c10_array(s.inactive_split_bytes, b.inactive_split_bytes);
    out.requested_bytes = to_c10_array(s.requested_bytes, b.requested_bytes);
    out.num_alloc_retries = s.num_alloc_retries - b.num_alloc_retries;
    out.num_ooms = s.num_ooms - b.num_ooms;
    out.oversize_allocations = to_c10(s.oversize_allocations, b.oversize_allocations);
    out.oversize_segments = to_c10(s.oversize_segments, b.oversize_segments);
    out.num_sync_all_streams = s.num_sync_all_streams - b.num_sync_all_streams;
    // PyTorch counts maps as device allocations and unmaps as device frees.
    out.num_device_alloc = s.num_device_alloc + s.num_device_map - b.num_device_alloc - b.num_device_map;
    out.num_device_free = s.num_device_free + s.num_device_unmap - b.num_device_free - b.num_device_unmap;
    out.max_split_size = static_cast<int64_t>(
        std::min<std::size_t>(e->config().max_split_size, std::numeric_limits<int64_t>::max()));
    return out;
  }
  // The engine's totals only grow; a reset remembers them as the new zero.
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    if (auto* e = engine_if_any(check(device))) {
      const auto s = e->stats();
      std::lock_guard<std::mutex> lock(stat_mu_);
      stat_base_[device] = s;
    }
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    if (auto* e = engine_if_any(check(device))) e->reset_peak_stats();
  }

  cca::SnapshotInfo snapshot(c10::MempoolId_t mempool_id, bool /*include_traces*/) override {
    no_private_pools(mempool_id, "snapshot");
    cca::SnapshotInfo info;
    for (int d = 0; d < devices_; ++d)
      if (auto* e = engine_if_any(d)) append_segments(d, *e, info.segments);
    info.device_traces.resize(devices_);  // no history is recorded (Note [What the CUDA adapter does not do])
    if (auto* e = engine_if_any(std::max(0, home_.load()))) {
      info.config_metadata.garbage_collection_threshold = e->config().gc_threshold;
      info.config_metadata.max_split_size = e->config().max_split_size;
      info.config_metadata.expandable_segments = e->source().can_map() && e->config().expandable_segments;
    }
    info.config_metadata.last_allocator_settings = "memcomm";
    return info;
  }

  // --- unsupported: Note [What the CUDA adapter does not do] ---------------------------------
  void beginAllocateToPool(c10::DeviceIndex, c10::MempoolId_t, std::function<bool(cudaStream_t)>) override {
    unsupported("CUDA graph private memory pools (torch.cuda.graph, MemPool)");
  }
  void endAllocateToPool(c10::DeviceIndex, c10::MempoolId_t) override {
    unsupported("CUDA graph private memory pools (torch.cuda.graph, MemPool)");
  }
  void releasePool(c10::DeviceIndex, c10::MempoolId_t) override {
    unsupported("CUDA graph private memory pools (torch.cuda.graph, MemPool)");
  }
  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex, c10::MempoolId_t) override {
    unsupported("checkpointing CUDA graph pool state");
  }
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex, std::shared_ptr<cca::AllocatorState>) override {
    unsupported("checkpointing CUDA graph pool state");
  }
  cca::ShareableHandle shareIpcHandle(void*) override { unsupported("CUDA IPC (sharing CUDA tensors between processes)"); }
  std::shared_ptr<void> getIpcDevPtr(std::string) override {
    unsupported("CUDA IPC (sharing CUDA tensors between processes)");
  }
  bool isHistoryEnabled() override { return false; }
  void recordHistory(bool enabled, cca::CreateContextFn, size_t, cca::RecordContext, bool,
                     const std::vector<std::string>&) override {
    if (enabled) unsupported("recording memory history; subscribe a memcomm::alloc::Observer to the engine instead");
  }
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> lock(oom_mu_);
    oom_observers_.push_back(std::move(observer));
  }
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker tracker) override { trace_.add(std::move(tracker)); }

  // --- peers --------------------------------------------------------------------------------
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override {
    c10::cuda::CUDAGuard g(dev);
    const cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();  // clear the sticky-free error
    } else {
      C10_CUDA_CHECK(err);
    }
  }
  // Peer copies always work, also for cuda-vmm memory mapped only for its own device.
  cudaError_t memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                          cudaStream_t stream, bool /*p2p_enabled*/) override {
    if (dstDevice == srcDevice) return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
    return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
  }

 private:
  // See Note [Simulated CUDA adapter]: no CUDA calls there.
  c10::DeviceIndex current_device() const { return simulated_ ? 0 : c10::cuda::current_device(); }
  cudaStream_t current_stream(c10::DeviceIndex device) const {
    return simulated_ ? nullptr : c10::cuda::getCurrentCUDAStream(device).stream();
  }

  int check(c10::DeviceIndex device) const {
    TORCH_CHECK(device >= 0 && device < devices_, "memcomm's CUDA allocator: invalid device ", int(device),
                " (", devices_, " devices)");
    return device;
  }
  [[noreturn]] void unsupported(const char* what) {
    TORCH_CHECK(false, what, " is not supported by memcomm's allocator (installed by "
                "memcomm::alloc::install_torch_cuda_allocator); run without it to use this feature");
  }
  void no_private_pools(c10::MempoolId_t id, const char* op) {
    if (id.first != 0 || id.second != 0) unsupported(op == std::string("snapshot") ? "snapshot of a private pool"
                                                                                 : "emptyCache of a private pool");
  }

  CachingAllocator& engine_for(int device) {
    if (auto* e = engine_if_any(device)) return *e;
    check(static_cast<c10::DeviceIndex>(device));
    std::lock_guard<std::mutex> lock(create_mu_);
    if (auto* e = engine_if_any(device)) return *e;
    SourceOptions so;
    so.device = device;
    std::string kind = options_.cuda_source;
    if (kind == "auto") kind = driver_supports_vmm(device) ? "cuda-vmm" : "cuda";
    std::shared_ptr<MemorySource> source;
    try {
      if (simulated_) so.capacity = options_.config.capacity;
      source = simulated_ ? make_source("simulated", so)
                          : kind == "cuda-vmm" ? make_cuda_vmm_source(so) : make_cuda_source(so);
    } catch (const SourceError& err) {
      TORCH_CHECK(false, "memcomm's CUDA allocator: cannot open source '", kind, "' on device ", device, ": ",
                  err.what());
    }
    AllocatorConfig config = options_.config;
    size_t total = source->capacity();
    if (fractions_[device] < 1.0 && !simulated_) {
      size_t free_b = 0;
      c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
      C10_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
      const auto cap = static_cast<size_t>(fractions_[device] * double(total));
      config.capacity = config.capacity ? std::min(config.capacity, cap) : cap;
    }
    auto streams = simulated_ ? std::shared_ptr<StreamModel>() : make_cuda_streams(device);
    auto* engine = new CachingAllocator(std::move(source), config, std::move(streams));  // never freed
    engine->add_observer(&trace_);
    if (options_.observer) engine->add_observer(options_.observer);
    if (!simulated_ && nvtx_tool_attached()) {
      if (!nvtx_) nvtx_ = std::make_unique<NvtxMemoryObserver>();
      engine->add_observer(nvtx_.get());
    }
    int none = -1;
    home_.compare_exchange_strong(none, device);
    engines_[device].store(engine, std::memory_order_release);
    return *engine;
  }

  void* alloc_on(int device, size_t n, cudaStream_t stream) {
    CachingAllocator& engine = engine_for(device);
    void* p = nullptr;
    try {
      p = engine.allocate(n, reinterpret_cast<StreamId>(stream));
    } catch (const OutOfMemory& oom) {
      report_oom(device, oom);
      // Note [Out of memory as torch words it] (torch_cpu_allocator.cpp)
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. memcomm's allocator, device ", device, ": ",
                       oom.what());
    } catch (const SourceError& err) {
      TORCH_CHECK(false, "memcomm's CUDA allocator, device ", device, ": ", err.what());
    }
    report_allocation(engine, p, c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)), ReportedBytes::Blocks);
    if (device != home_.load(std::memory_order_relaxed)) {  // Note [Which engine frees a pointer]
      std::lock_guard<std::mutex> lock(foreign_mu_);
      foreign_[p] = device;
      foreign_live_.fetch_add(1, std::memory_order_release);
    }
    return p;
  }

  void report_oom(int device, const OutOfMemory& oom) {
    std::vector<cca::OutOfMemoryObserver> observers;
    {
      std::lock_guard<std::mutex> lock(oom_mu_);
      observers = oom_observers_;
    }
    if (observers.empty()) return;
    size_t free_b = 0, total = 0;
    if (simulated_) {
      total = oom.reserved;  // the simulated device is exactly what was reserved
    } else {
      c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
      if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) (void)cudaGetLastError();
    }
    for (auto& o : observers) o(device, oom.allocated, total, free_b);
  }

  // PyTorch reports the mapped runs of an expandable segment as separate segments; so do we.
  static void append_segments(int device, const CachingAllocator& e, std::vector<cca::SegmentInfo>& out) {
    for (const auto& s : mapped_runs(e.snapshot())) {
      cca::SegmentInfo* cur = &out.emplace_back();
      cur->device = static_cast<c10::DeviceIndex>(device);
      cur->address = s.base;
      cur->stream = reinterpret_cast<void*>(s.stream);
      cur->is_large = !s.small_pool;
      cur->is_expandable = s.expandable;
      for (const auto& b : s.blocks) {
        cca::BlockInfo bi;
        bi.size = b.size;
        bi.requested_size = b.requested;
        bi.allocated = b.allocated;
        bi.active = b.allocated || b.pending;
        cur->blocks.push_back(bi);
        cur->total_size += b.size;
        cur->requested_size += b.requested;
        if (b.allocated) cur->allocated_size += b.size;
        if (bi.active) cur->active_size += b.size;
      }
    }
  }

  const TorchAllocatorOptions options_;                        // as given to install
  const bool simulated_;                                       // Note [Simulated CUDA adapter]
  const int devices_;                                          // GPUs visible at install
  std::unique_ptr<std::atomic<CachingAllocator*>[]> engines_;  // per device; null until its first allocation
  std::atomic<int> home_{-1};                                  // first device that allocated
  std::mutex create_mu_;                                       // serialises engine creation and fractions_
  std::vector<double> fractions_;                              // setMemoryFraction per device
  std::mutex foreign_mu_;                                      // guards foreign_
  std::unordered_map<void*, int> foreign_;                     // live blocks of non-home devices
  std::atomic<std::int64_t> foreign_live_{0};                  // foreign_.size(), read without the lock
  std::mutex stat_mu_;                                         // guards stat_base_
  std::vector<alloc::DeviceStats> stat_base_;                  // totals at resetAccumulatedStats
  std::mutex oom_mu_;                                          // guards oom_observers_
  std::vector<cca::OutOfMemoryObserver> oom_observers_;        // called before OutOfMemoryError is thrown
  TraceForwarder trace_;                                       // allocator trace trackers
  std::unique_ptr<NvtxMemoryObserver> nvtx_;                   // with an NVTX tool attached; engines' lifetime
};

void free_block(void* ptr) { g_adapter->free(ptr); }

// Whether torch's current CUDA allocator has handed out memory (its blocks could not be freed by us).
bool current_allocator_has_allocated(int devices) {
  cca::CUDAAllocator* current = cca::get();
  if (!current || !current->initialized()) return false;
  for (int d = 0; d < devices; ++d) {
    try {
      const auto s = current->getDeviceStats(static_cast<c10::DeviceIndex>(d));
      const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
      if (s.allocation[agg].allocated > 0 || s.reserved_bytes[agg].current > 0) return true;
    } catch (const c10::Error&) {  // a backend without stats (cudaMallocAsync before use): nothing to tell
    }
  }
  return false;
}

}  // namespace

void install_torch_cuda_allocator(const TorchAllocatorOptions& options) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (options.cuda_source != "auto" && options.cuda_source != "cuda" && options.cuda_source != "cuda-vmm" &&
      options.cuda_source != "simulated")
    throw std::invalid_argument("install_torch_cuda_allocator: unknown cuda_source '" + options.cuda_source +
                                "' (expected auto, cuda-vmm, cuda or simulated)");
  if (g_adapter) return;
  const bool simulated = options.cuda_source == "simulated";  // Note [Simulated CUDA adapter]
  const int devices = simulated ? 1 : cuda_device_count();
  if (devices == 0) throw SourceError("install_torch_cuda_allocator: no usable CUDA GPU here (no driver or no device)");
  if (!simulated && current_allocator_has_allocated(devices))
    throw std::logic_error(std::string("install_torch_cuda_allocator: torch's CUDA allocator (") + cca::get()->name() +
                           ") has already allocated CUDA memory; install memcomm's allocator before the first CUDA "
                           "allocation of the process");
  g_adapter = new TorchCudaAdapter(options, devices);  // Note [Adapter lifetime]
  cca::allocator.store(g_adapter);
  c10::SetAllocator(c10::DeviceType::CUDA, g_adapter, /*priority=*/1);
}

CachingAllocator* torch_cuda_allocator(int device) { return g_adapter ? g_adapter->engine_if_any(device) : nullptr; }

}  // namespace memcomm::alloc
