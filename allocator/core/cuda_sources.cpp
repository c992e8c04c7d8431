// CUDA memory sources: "cuda" (cudaMalloc/cudaFree) and "cuda-vmm" (driver virtual memory management),
// and cudaEvent streams.
//
// Note [CUDA without a GPU]
// The runtime API is linked (CUDA::cudart); programs start on machines without a driver, where
// cudaGetDeviceCount returns cudaErrorInsufficientDriver: that means zero GPUs, and the factories throw
// SourceError saying so. The driver API is never linked (that would stop binaries from starting without
// libcuda.so.1): it is loaded with dlopen at run time, and only the VMM source needs it.
//
// Note [VMM pages]
// cuda-vmm backs each page with its own physical allocation (cuMemCreate of one granule), as PyTorch's
// expandable segments do: one map() call then covers a contiguous run of pages, and any sub-range can be
// unmapped later, which cuMemUnmap only allows on whole allocations.

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <map>
#include <mutex>
#include <type_traits>
#include <string>
#include <vector>

#include "memcomm/allocator/cuda_sources.hpp"

namespace memcomm::alloc {

namespace {

std::string rt_error(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

// Makes `device` current for the lifetime of the guard.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) {
      const cudaError_t e = cudaSetDevice(device);
      if (e != cudaSuccess) throw SourceError(rt_error("cudaSetDevice", e));
    }
    device_ = device;
  }
  ~DeviceGuard() {
    if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;  // device current before the guard
  int device_ = 0;     // device made current
};

void require_device(const char* source, int device) {
  const int n = cuda_device_count();
  if (n == 0)
    throw SourceError(std::string(source) + " source: no usable CUDA GPU here (no driver or no device)");
  if (device < 0 || device >= n)
    throw SourceError(std::string(source) + " source: device " + std::to_string(device) + " does not exist (" +
                      std::to_string(n) + " GPU(s))");
}

class CudaSource final : public MemorySource {
 public:
  explicit CudaSource(const SourceOptions& o) : device_(o.device) {
    require_device("cuda", device_);
    DeviceGuard g(device_);
    std::size_t free_b = 0, total_b = 0;
    const cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) throw SourceError(rt_error("cudaMemGetInfo", e));
    capacity_ = o.capacity ? o.capacity : total_b;
  }
  const char* name() const override { return "cuda"; }
  int device() const override { return device_; }
  std::size_t granularity() const override { return 2u << 20; }
  std::size_t capacity() const override { return capacity_; }
  bool can_map() const override { return false; }
  void* allocate(std::size_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (capacity_ && c_.backed_bytes + bytes > capacity_) {
        c_.failed++;
        return nullptr;
      }
    }
    DeviceGuard g(device_);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    std::lock_guard<std::mutex> lock(mu_);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error state
      c_.failed++;
      return nullptr;
    }
    if (e != cudaSuccess) throw SourceError(rt_error("cudaMalloc", e));
    c_.allocs++;
    c_.backed_bytes += bytes;
    if (c_.backed_bytes > c_.peak_backed_bytes) c_.peak_backed_bytes = c_.backed_bytes;
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes) override {
    DeviceGuard g(device_);
    const cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess) throw SourceError(rt_error("cudaFree", e));
    std::lock_guard<std::mutex> lock(mu_);
    c_.frees++;
    c_.backed_bytes -= bytes;
  }
  SourceCounters counters() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return c_;
  }

 private:
  int device_;                // CUDA device
  std::size_t capacity_ = 0;  // bytes at most (device memory by default)
  mutable std::mutex mu_;     // guards c_
  SourceCounters c_;
};

// The driver entry points the VMM source needs, resolved with dlsym.
struct Driver {
  CUresult (*cuInit)(unsigned int) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuMemGetAllocationGranularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) =
      nullptr;
  CUresult (*cuMemAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*cuMemAddressFree)(CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long) =
      nullptr;
  CUresult (*cuMemRelease)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*cuMemUnmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;

  static const Driver& get() {
    static Driver d = load();
    return d;
  }
  std::string error(const char* what, CUresult r) const {
    const char* name = nullptr;
    if (cuGetErrorName) cuGetErrorName(r, &name);
    return std::string("cuda-vmm: ") + what + " failed: " + (name ? name : std::to_string(int(r)));
  }

 private:
  static Driver load() {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) throw SourceError(std::string("cuda-vmm: cannot load the CUDA driver (libcuda.so.1): ") + dlerror());
    Driver d;
    auto sym = [&](auto& fn, const char* name) {
      void* p = dlsym(h, name);
      if (!p) throw SourceError(std::string("cuda-vmm: the CUDA driver lacks ") + name);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    sym(d.cuInit, "cuInit");
    sym(d.cuDeviceGet, "cuDeviceGet");
    sym(d.cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity");
    sym(d.cuMemAddressReserve, "cuMemAddressReserve");
    sym(d.cuMemAddressFree, "cuMemAddressFree");
    sym(d.cuMemCreate, "cuMemCreate");
    sym(d.cuMemRelease, "cuMemRelease");
    sym(d.cuMemMap, "cuMemMap");
    sym(d.cuMemUnmap, "cuMemUnmap");
    sym(d.cuMemSetAccess, "cuMemSetAccess");
    sym(d.cuGetErrorName, "cuGetErrorName");
    return d;  // the handle stays open for the life of the process
  }
};

class CudaVmmSource final : public MemorySource {
 public:
  explicit CudaVmmSource(const SourceOptions& o) : device_(o.device), drv_(Driver::get()) {
    require_device("cuda-vmm", device_);
    DeviceGuard g(device_);
    cudaFree(nullptr);  // creates the primary context the driver calls below run in
    check(drv_.cuInit(0), "cuInit");
    CUdevice dev;
    check(drv_.cuDeviceGet(&dev, device_), "cuDeviceGet");
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = dev;
    check(drv_.cuMemGetAllocationGranularity(&granularity_, &prop_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
          "cuMemGetAllocationGranularity");
    std::size_t free_b = 0, total_b = 0;
    const cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) throw SourceError(rt_error("cudaMemGetInfo", e));
    capacity_ = o.capacity ? o.capacity : total_b;
    access_.location = prop_.location;
    access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  const char* name() const override { return "cuda-vmm"; }
  int device() const override { return device_; }
  std::size_t granularity() const override { return granularity_; }
  std::size_t capacity() const override { return capacity_; }
  bool can_map() const override { return true; }

  void* allocate(std::size_t bytes) override {
    void* base = reserve(bytes);
    if (!map(base, bytes)) {
      release(base, bytes);
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(mu_);
    c_.reserves--;
    c_.maps--;
    c_.allocs++;
    return base;
  }
  void deallocate(void* ptr, std::size_t bytes) override {
    unmap(ptr, bytes);
    release(ptr, bytes);
    std::lock_guard<std::mutex> lock(mu_);
    c_.unmaps--;
    c_.releases--;
    c_.frees++;
  }
  void* reserve(std::size_t bytes) override {
    DeviceGuard g(device_);
    CUdeviceptr p = 0;
    check(drv_.cuMemAddressReserve(&p, bytes, granularity_, 0, 0), "cuMemAddressReserve");
    std::lock_guard<std::mutex> lock(mu_);
    c_.reserves++;
    return reinterpret_cast<void*>(p);
  }
  void release(void* base, std::size_t bytes) override {
    DeviceGuard g(device_);
    check(drv_.cuMemAddressFree(reinterpret_cast<CUdeviceptr>(base), bytes), "cuMemAddressFree");
    std::lock_guard<std::mutex> lock(mu_);
    c_.releases++;
  }
  bool map(void* addr, std::size_t bytes) override {
    const auto a = reinterpret_cast<CUdeviceptr>(addr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (capacity_ && c_.backed_bytes + bytes > capacity_) {
        c_.failed++;
        return false;
      }
    }
    DeviceGuard g(device_);
    std::vector<CUmemGenericAllocationHandle> handles;
    auto rollback = [&] {
      for (std::size_t i = 0; i < handles.size(); ++i) {
        drv_.cuMemUnmap(a + i * granularity_, granularity_);
        drv_.cuMemRelease(handles[i]);
      }
    };
    for (std::size_t off = 0; off < bytes; off += granularity_) {
      CUmemGenericAllocationHandle h;
      const CUresult r = drv_.cuMemCreate(&h, granularity_, &prop_, 0);
      if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        rollback();
        std::lock_guard<std::mutex> lock(mu_);
        c_.failed++;
        return false;
      }
      if (r != CUDA_SUCCESS) {
        rollback();
        throw SourceError(drv_.error("cuMemCreate", r));
      }
      const CUresult m = drv_.cuMemMap(a + off, granularity_, 0, h, 0);
      if (m != CUDA_SUCCESS) {
        drv_.cuMemRelease(h);
        rollback();
        throw SourceError(drv_.error("cuMemMap", m));
      }
      handles.push_back(h);
    }
    const CUresult s = drv_.cuMemSetAccess(a, bytes, &access_, 1);
    if (s != CUDA_SUCCESS) {
      rollback();
      throw SourceError(drv_.error("cuMemSetAccess", s));
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t i = 0; i < handles.size(); ++i) pages_[a + i * granularity_] = handles[i];
    c_.maps++;
    c_.backed_bytes += bytes;
    if (c_.backed_bytes > c_.peak_backed_bytes) c_.peak_backed_bytes = c_.backed_bytes;
    return true;
  }
  void unmap(void* addr, std::size_t bytes) override {
    const auto a = reinterpret_cast<CUdeviceptr>(addr);
    DeviceGuard g(device_);
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t off = 0; off < bytes; off += granularity_) {
      auto it = pages_.find(a + off);
      if (it == pages_.end()) throw SourceError("cuda-vmm: unmap of a page that is not mapped");
      check(drv_.cuMemUnmap(a + off, granularity_), "cuMemUnmap");
      check(drv_.cuMemRelease(it->second), "cuMemRelease");
      pages_.erase(it);
    }
    c_.unmaps++;
    c_.backed_bytes -= bytes;
  }
  SourceCounters counters() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return c_;
  }

 private:
  void check(CUresult r, const char* what) const {
    if (r != CUDA_SUCCESS) throw SourceError(drv_.error(what, r));
  }
  int device_;                         // CUDA device
  const Driver& drv_;                  // driver entry points
  CUmemAllocationProp prop_{};         // pinned device memory on device_
  CUmemAccessDesc access_{};           // read-write from device_
  std::size_t granularity_ = 0;        // recommended granularity
  std::size_t capacity_ = 0;           // bytes at most
  mutable std::mutex mu_;              // guards pages_ and c_
  std::map<CUdeviceptr, CUmemGenericAllocationHandle> pages_;  // one physical allocation per mapped page
  SourceCounters c_;
};

class CudaStreams final : public StreamModel {
 public:
  explicit CudaStreams(int device) : device_(device) {}
  EventHandle create_event() override {
    DeviceGuard g(device_);
    cudaEvent_t e = nullptr;
    const cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (r != cudaSuccess) throw SourceError(rt_error("cudaEventCreateWithFlags", r));
    return reinterpret_cast<EventHandle>(e);
  }
  void destroy_event(EventHandle event) override { cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)); }
  void record_event(EventHandle event, StreamId stream) override {
    DeviceGuard g(device_);
    const cudaError_t r = cudaEventRecord(reinterpret_cast<cudaEvent_t>(event), reinterpret_cast<cudaStream_t>(stream));
    if (r != cudaSuccess) throw SourceError(rt_error("cudaEventRecord", r));
  }
  bool query_event(EventHandle event) override {
    const cudaError_t r = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (r == cudaSuccess) return true;
    if (r == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    throw SourceError(rt_error("cudaEventQuery", r));
  }
  void synchronize_event(EventHandle event) override {
    const cudaError_t r = cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event));
    if (r != cudaSuccess) throw SourceError(rt_error("cudaEventSynchronize", r));
  }

 private:
  int device_;  // device events are created on
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // cudaErrorInsufficientDriver or cudaErrorNoDevice: zero GPUs
    return 0;
  }
  return n;
}

std::shared_ptr<MemorySource> make_cuda_source(const SourceOptions& options) {
  return std::make_shared<CudaSource>(options);
}

std::shared_ptr<MemorySource> make_cuda_vmm_source(const SourceOptions& options) {
  require_device("cuda-vmm", options.device);
  return std::make_shared<CudaVmmSource>(options);
}

std::shared_ptr<StreamModel> make_cuda_streams(int device) { return std::make_shared<CudaStreams>(device); }

void register_cuda_sources() {
  register_source("cuda", make_cuda_source);
  register_source("cuda-vmm", make_cuda_vmm_source);
}

}  // namespace memcomm::alloc
