// A collective as the profiler and the summary see it; free of LibTorch.
#pragma once

#include <cstdint>
#include <string>

namespace memcomm::train {

struct CollectiveRecord {
  std::string op;        // allreduce | broadcast | barrier
  int64_t bytes = 0;     // payload per rank
  int bucket = -1;       // gradient bucket, -1 for others
  int64_t seq = 0;       // per-communicator sequence number, equal across ranks for the same call
  int64_t start_ns = 0;  // CLOCK_MONOTONIC when issued
  int64_t end_ns = 0;    // CLOCK_MONOTONIC when it completed
  std::string dtype = "f32";  // element type on the wire: f32, f64, bf16 or f16 (compression), i64, u8
};

}  // namespace memcomm::train
