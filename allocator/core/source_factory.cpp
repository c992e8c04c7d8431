// make_source: sources by name.
//
// Note [Sources by name]
// The engine library knows the sources that need no GPU ("host", "simulated"). The CUDA ones live in
// memcomm::allocator_cuda, which links libcudart; if the engine reached them itself, every program
// that links the engine (replay, the advisor, and through them memcomm-trace and the viewer) would
// need the CUDA runtime. Instead the CUDA library registers its factories when a program that links
// it calls register_cuda_sources() (the trainer, the torch adapter, the GPU tests), and make_source
// finds them here. A name that is registered nowhere gets a SourceError saying where it lives, so a
// "cuda" request in a CPU-only program fails as clearly as on a machine without a GPU.

#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "memcomm/allocator/memory_source.hpp"
#include "memcomm/allocator/sources.hpp"

namespace memcomm::alloc {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::pair<std::string, SourceFactory>> factories;
};

Registry& registry() {
  static Registry r;
  return r;
}

SourceFactory find_registered(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& [n, f] : r.factories)
    if (n == name) return f;
  return nullptr;
}

}  // namespace

void register_source(const std::string& name, SourceFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& [n, f] : r.factories)
    if (n == name) {
      f = factory;
      return;
    }
  r.factories.emplace_back(name, factory);
}

std::vector<std::string> known_source_names() {
  std::vector<std::string> names = {"host", "simulated"};
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& entry : r.factories) names.push_back(entry.first);
  return names;
}

std::shared_ptr<MemorySource> make_source(const std::string& name, const SourceOptions& options) {
  if (name == "host") return std::make_shared<HostSource>(options);
  if (name == "simulated") return std::make_shared<SimulatedSource>(options);
  if (SourceFactory factory = find_registered(name)) return factory(options);
  if (name == "cuda" || name == "cuda-vmm")
    throw SourceError("memory source '" + name + "' lives in memcomm::allocator_cuda: this program did not "
                      "register it (link memcomm::allocator_cuda, built with the CUDA toolkit, and call "
                      "register_cuda_sources() first)");
  std::string known;
  for (const std::string& n : known_source_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown memory source '" + name + "' (known: " + known + ")");
}

}  // namespace memcomm::alloc
