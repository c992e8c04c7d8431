// What one optimizer step's time was spent on; free of LibTorch, so the tuner's probes read it too.
#pragma once

#include <cstdint>

namespace memcomm::train {

// Where one step's time went, on this rank (added to by each step).
struct StepTiming {
  int64_t data_wait_ns = 0;     // blocked on the loader
  int64_t backward_ns = 0;      // inside backward (all micro-steps)
  int64_t early_micro_ns = 0;   // the K-1 micro-steps that do not synchronise (no_sync)
  int64_t last_micro_ns = 0;    // the last micro-step, the gradient sync and the optimizer step
  int64_t exposed_comm_ns = 0;  // waiting for gradient all-reduces after backward
};

}  // namespace memcomm::train
