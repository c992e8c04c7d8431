// c10::Allocator over memcomm's CachingAllocator for LibTorch's CPU tensors.
//
// Note [Adapter lifetime]: LibTorch keeps raw pointers to registered allocators and frees tensors
// during static destruction, so the adapter and its engine are created once and never destroyed.
#include "memcomm/allocator/torch_allocator.hpp"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <stdexcept>

namespace memcomm::alloc {

namespace {

CachingAllocator* g_engine = nullptr;  // Note [Adapter lifetime]: leaked on purpose

void free_block(void* ptr) { g_engine->deallocate(ptr); }

class TorchCpuAdapter final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    try {
      if (n > 0) p = g_engine->allocate(n);
    } catch (const OutOfMemory& oom) {  // as torch.OutOfMemoryError in Python, as CUDA's are
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory (memcomm's allocator). ", oom.what());
    }
    return {p, p, &free_block, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

}  // namespace

CachingAllocator& install_torch_cpu_allocator(const TorchAllocatorOptions& options) {
  static std::once_flag once;
  std::call_once(once, [&] {
    auto source = make_source(options.source, SourceOptions{options.config.capacity});
    if (!source->host_accessible())
      throw std::invalid_argument("install_torch_cpu_allocator: source '" + options.source +
                                  "' does not give memory the CPU can touch; use \"host\"");
    if (options.config.min_block < 64)
      throw std::invalid_argument("install_torch_cpu_allocator: min_block must be >= 64 (LibTorch's CPU alignment)");
    g_engine = new CachingAllocator(std::move(source), options.config);
    if (options.observer) g_engine->add_observer(options.observer);
    static TorchCpuAdapter* adapter = new TorchCpuAdapter();  // Note [Adapter lifetime]
    c10::SetAllocator(c10::DeviceType::CPU, adapter, /*priority=*/1);
  });
  return *g_engine;
}

CachingAllocator* torch_cpu_allocator() { return g_engine; }

}  // namespace memcomm::alloc
