// The policy registry: names on the command line -> Policy objects.
#include <stdexcept>

#include "memcomm/replay/policy.hpp"
#include "memcomm/replay/pytorch_sim.hpp"
#include "engine_policy.hpp"

namespace memcomm::replay {

std::vector<std::string> policy_names() {
  std::vector<std::string> names = {"pytorch", "pytorch-expandable"};
  names.push_back("memcomm");
  return names;
}

std::string policy_help() {
  std::string h =
      "  recorded            what the traced allocator itself did, from the trace's segment events (not a\n"
      "                      simulation): PyTorch's for snapshot pickles, memcomm's own for .mct traces,\n"
      "                      PyTorch's as the Total Reserved of a torch.profiler trace's [memory] events\n"
      "  pytorch             simulation of PyTorch 2.x's CUDACachingAllocator, default settings\n"
      "                      (max_split_size taken from the trace's allocator_settings when set)\n"
      "  pytorch-expandable  the same with expandable_segments:True\n";
  h += "  memcomm             memcomm's caching allocator, default configuration, simulated source\n";
  return h;
}

std::unique_ptr<Policy> make_policy(std::string_view name, const PolicyOptions& options) {
  if (name == "pytorch" || name == "pytorch-expandable") {
    PyTorchSimConfig cfg;
    cfg.capacity = options.capacity;
    cfg.expandable_segments = name == "pytorch-expandable";
    if (options.settings.max_split_size > 0) cfg.max_split_size = static_cast<std::uint64_t>(options.settings.max_split_size);
    return make_pytorch_sim(cfg);
  }
  if (name == "memcomm") return make_engine_policy(options);
  std::string known = "recorded";
  for (const auto& n : policy_names()) known += ", " + n;
  throw std::invalid_argument("unknown policy '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace memcomm::replay
