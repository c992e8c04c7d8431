// The part both replay fuzz targets share: every device of a loaded trace replayed through the
// PyTorch simulation, with and without expandable segments, with invariant checks on.
#pragma once

#include <cstdint>

#include "memcomm/replay/pytorch_sim.hpp"
#include "memcomm/replay/replayer.hpp"

namespace memcomm_fuzz {

inline void replay_checked(const memcomm::replay::TraceRequests& trace) {
  namespace replay = memcomm::replay;
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
}

}  // namespace memcomm_fuzz
