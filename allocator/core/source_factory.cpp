// make_source: sources by name.

#include <stdexcept>
#include <string>

#include "memcomm/allocator/memory_source.hpp"
#include "memcomm/allocator/sources.hpp"
#ifdef MEMCOMM_ALLOCATOR_WITH_CUDA
#include "memcomm/allocator/cuda_sources.hpp"
#endif

namespace memcomm::alloc {

const char* const* known_source_names() {
#ifdef MEMCOMM_ALLOCATOR_WITH_CUDA
  static const char* const names[] = {"host", "simulated", "cuda", "cuda-vmm", nullptr};
#else
  static const char* const names[] = {"host", "simulated", nullptr};
#endif
  return names;
}

std::shared_ptr<MemorySource> make_source(const std::string& name, const SourceOptions& options) {
  if (name == "host") return std::make_shared<HostSource>(options);
  if (name == "simulated") return std::make_shared<SimulatedSource>(options);
  if (name == "cuda" || name == "cuda-vmm") {
#ifdef MEMCOMM_ALLOCATOR_WITH_CUDA
    return name == "cuda" ? make_cuda_source(options) : make_cuda_vmm_source(options);
#else
    throw SourceError("memory source '" + name + "' needs CUDA, and this build of memcomm has none "
                      "(configure with the CUDA toolkit on PATH and MEMCOMM_WITH_CUDA=AUTO or ON)");
#endif
  }
  std::string known;
  for (const char* const* n = known_source_names(); *n; ++n) known += std::string(known.empty() ? "" : ", ") + *n;
  throw std::invalid_argument("unknown memory source '" + name + "' (known: " + known + ")");
}

}  // namespace memcomm::alloc
