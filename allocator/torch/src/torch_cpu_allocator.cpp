// c10::Allocator over memcomm's CachingAllocator for LibTorch's CPU tensors.
//
// Note [Adapter lifetime]: LibTorch keeps raw pointers to registered allocators and frees tensors
// during static destruction, so the adapter and its engine are created once and never destroyed.
#include "memcomm/allocator/torch_allocator.hpp"

#include "profiler_memory.hpp"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <mutex>
#include <stdexcept>

namespace memcomm::alloc {

namespace {

CachingAllocator* g_engine = nullptr;  // Note [Adapter lifetime]: leaked on purpose

const c10::Device kCpu(c10::DeviceType::CPU);

// The engine's message without its "memcomm: " (the adapter's message names memcomm already).
const char* without_prefix(const char* what) {
  constexpr char kPrefix[] = "memcomm: ";
  return std::strncmp(what, kPrefix, sizeof kPrefix - 1) == 0 ? what + sizeof kPrefix - 1 : what;
}

// Frees and allocations reported while a profile records memory (see Note [Memory events for torch.profiler]).
void free_block(void* ptr) { deallocate_reported(*g_engine, ptr, kCpu, ReportedBytes::Requested); }

class TorchCpuAdapter final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    try {
      if (n > 0) p = g_engine->allocate(n);
    } catch (const OutOfMemory& oom) {  // as torch.OutOfMemoryError in Python, as CUDA's are
      // Note [Out of memory as torch words it]: batch-size finders tell an out-of-memory worth a retry
      // with a smaller batch by its message: accelerate's find_executable_batch_size (Hugging Face's
      // auto_find_batch_size) looks for " out of memory." (torch's "CUDA out of memory. Tried to
      // allocate..."); Lightning's scale_batch_size for "CUDA" and "out of memory", or on the CPU for
      // torch's "DefaultCPUAllocator: can't allocate memory". memcomm's say the same, so they halve
      // the batch under memcomm's allocator too (the run ended there).
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory. memcomm's allocator (in place of ",
                       "DefaultCPUAllocator: can't allocate memory): ", without_prefix(oom.what()));
    }
    report_allocation(*g_engine, p, kCpu, ReportedBytes::Requested);
    return {p, p, &free_block, kCpu};
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
    g_engine = new CachingAllocator(std::move(source), options.config);
    if (options.observer) g_engine->add_observer(options.observer);
    static TorchCpuAdapter* adapter = new TorchCpuAdapter();  // Note [Adapter lifetime]
    c10::SetAllocator(c10::DeviceType::CPU, adapter, /*priority=*/1);
  });
  return *g_engine;
}

CachingAllocator* torch_cpu_allocator() { return g_engine; }

}  // namespace memcomm::alloc
