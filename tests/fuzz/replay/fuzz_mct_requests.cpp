// libFuzzer target for memcomm-replay's other input: .mct bytes -> read_mct_trace (the profiler's
// trace reader feeding RequestBuilder) -> a checked replay through the PyTorch simulation.
// Any input must either load or raise snapshot::ReadError; nothing else may escape or crash.
#include <cstddef>
#include <cstdint>

#include "../fuzz_file.hpp"
#include "mct_trace.hpp"
#include "memcomm/replay/pytorch_sim.hpp"
#include "memcomm/replay/replayer.hpp"
#include "memcomm/snapshot/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memcomm;
  replay::TraceRequests trace;
  try {
    trace = replay::read_mct_trace(memcomm_fuzz::as_file(data, size));
  } catch (const snapshot::ReadError&) {
    return 0;
  }
  for (const auto& dev : trace.devices) {
    if (dev.requests.size() > 100000) continue;  // keep each input fast
    for (bool expandable : {false, true}) {
      replay::PyTorchSimConfig cfg;
      cfg.expandable_segments = expandable;
      cfg.capacity = std::uint64_t{1} << 34;  // exercise the free-cache-and-retry path too
      auto policy = replay::make_pytorch_sim(cfg);
      replay::ReplayOptions opts;
      opts.check = true;  // a broken invariant throws std::logic_error: a finding
      opts.check_every = 64;
      replay::replay_device(trace, dev, *policy, opts);
    }
  }
  return 0;
}
