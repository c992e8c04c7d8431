// torch.profiler (Kineto) traces for the viewer's tests: small hand-written ones (what each field
// becomes is known), and the real ones beside the checkout (../shared/traces/kineto, described in
// its SOURCES.md), which a test that needs them skips, never passes, without.
#pragma once

#include "memcomm_test.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace kineto_traces {

// A real trace, or the test is skipped. `rel` is relative to ../shared/traces/kineto.
inline std::string shared(const std::string& rel) {
  const std::string path = memcomm::test::source_dir() + "/../shared/traces/kineto/" + rel;
  if (!std::filesystem::exists(path)) MEMCOMM_SKIP_TEST(path + " is missing (../shared/traces is not beside this checkout)");
  return path;
}

// One rank of a 2-rank run, timestamps in us from 1000 after baseTimeNanoseconds (2023-11-14):
//   thread "python main": ProfilerStep#7 [1000, 2000), aten::mm [1100, 1300) and in it
//     cudaLaunchKernel [1150, 1170) (correlation 5);
//   GPU 0 stream 7: gemm_kernel [1200, 1500), under the GPU annotation "fwd" [1190, 1590);
//   GPU 0 stream 20: an NCCL all-reduce of 1024 floats from `nccl_start` for 200 us;
//   [memory]: 1 MiB allocated at 1120 (totals 5 MiB allocated, 8 MiB reserved), freed at 1400
//     (4 MiB allocated).
inline std::string json(std::uint32_t rank, int nccl_start) {
  const std::string r = std::to_string(rank);
  return R"J({"schemaVersion": 1, "baseTimeNanoseconds": 1700000000000000000, "distributedInfo": {"rank": )J" + r + R"J(, "world_size": 2},
 "traceEvents": [
  {"ph": "M", "name": "thread_name", "pid": 10, "tid": 11, "args": {"name": "python main"}},
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 10, "tid": 11, "ts": 1000, "dur": 1000},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 11, "ts": 1100, "dur": 200},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": 1150, "dur": 20, "args": {"correlation": 5}},
  {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": 1200, "dur": 300, "args": {"device": 0, "stream": 7, "correlation": 5}},
  {"ph": "X", "cat": "gpu_user_annotation", "name": "fwd", "pid": 0, "tid": 7, "ts": 1190, "dur": 400, "args": {"device": 0, "stream": 7}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "pid": 0, "tid": 20, "ts": )J" +
         std::to_string(nccl_start) + R"J(, "dur": 200, "args": {"device": 0, "stream": 20, "correlation": 6, "In msg nelems": 1024, "dtype": "Float", "Collective name": "allreduce"}},
  {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 10, "tid": 11, "ts": 1120, "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": 1048576, "Total Allocated": 5242880, "Total Reserved": 8388608}},
  {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 10, "tid": 11, "ts": 1400, "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": -1048576, "Total Allocated": 4194304, "Total Reserved": 8388608}}
 ]}
)J";
}

inline void write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

}  // namespace kineto_traces
