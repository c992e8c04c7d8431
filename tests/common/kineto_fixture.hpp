// A small torch.profiler (Kineto) trace written by the tests, and where the real ones are.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "memcomm_test.hpp"

namespace memcomm::test {

// The real torch.profiler traces beside the checkout (../shared/traces/kineto, SOURCES.md there).
inline std::string shared_kineto_dir() { return source_dir() + "/../shared/traces/kineto"; }

struct KinetoFixture {
  std::string json;
  uint64_t events = 0;            // traceEvents elements
  uint64_t memory_events = 0;     // [memory] events among them
  uint64_t max_allocated = 0;     // the largest Total Allocated
  uint64_t max_reserved = 0;      // the largest Total Reserved
};

// `steps` ProfilerSteps of rank `rank`, each with a launch, a kernel, an NCCL all-reduce kernel and,
// with `memory`, [memory] events: two blocks allocated and freed per step, after a first free of a
// 512-byte block allocated before the trace, with 4096 more bytes live before and throughout.
// Events are written out of time order (memory last), as Kineto does.
inline KinetoFixture kineto_fixture(int rank, int steps, bool memory) {
  KinetoFixture f;
  std::string ev;
  auto add = [&](const std::string& e) {
    ev += (f.events++ ? ",\n" : "\n") + e;
  };
  const std::string pid = "\"pid\": 100, \"tid\": 101";
  for (int s = 1; s <= steps; ++s) {
    const int64_t t = 1000000 + int64_t(s) * 1000;
    const std::string corr = std::to_string(2 * s), corr2 = std::to_string(2 * s + 1);
    add("{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"ProfilerStep#" + std::to_string(s) + "\", " + pid +
        ", \"ts\": " + std::to_string(t) + ", \"dur\": 900}");
    add("{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", " + pid + ", \"ts\": " +
        std::to_string(t + 10) + ", \"dur\": 5, \"args\": {\"correlation\": " + corr + "}}");
    add("{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"gemm_kernel\", \"pid\": 0, \"tid\": 7, \"ts\": " +
        std::to_string(t + 20) + ", \"dur\": 300.5, \"args\": {\"device\": 0, \"stream\": 7, \"correlation\": " + corr +
        "}}");
    add("{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", " + pid + ", \"ts\": " +
        std::to_string(t + 30) + ", \"dur\": 5, \"args\": {\"correlation\": " + corr2 + "}}");
    add("{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, "
        "unsigned long, ncclWork*)\", \"pid\": 0, \"tid\": 20, \"ts\": " + std::to_string(t + 400) +
        ", \"dur\": 200, \"args\": {\"device\": 0, \"stream\": 20, \"correlation\": " + corr2 +
        ", \"Collective name\": \"allreduce\", \"In msg nelems\": 262144, \"Out msg nelems\": 262144, "
        "\"dtype\": \"Float\", \"Group size\": 2, \"Process Group Name\": \"0\"}}");
  }
  if (memory) {
    uint64_t allocated = 4096 + 512, reserved = 8u << 20;
    auto mem = [&](int64_t ts, uint64_t addr, int64_t bytes) {
      allocated = uint64_t(int64_t(allocated) + bytes);
      while (allocated > reserved) reserved += 2u << 20;
      f.max_allocated = std::max(f.max_allocated, allocated);
      f.max_reserved = std::max(f.max_reserved, reserved);
      ++f.memory_events;
      add("{\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"s\": \"t\", \"name\": \"[memory]\", " + pid +
          ", \"ts\": " + std::to_string(ts) + ", \"args\": {\"Device Type\": 1, \"Device Id\": 0, \"Addr\": " +
          std::to_string(addr) + ", \"Bytes\": " + std::to_string(bytes) + ", \"Total Allocated\": " +
          std::to_string(allocated) + ", \"Total Reserved\": " + std::to_string(reserved) + "}}");
    };
    mem(1000000 + 1005, 0x7f0000100000, -512);  // allocated before the trace
    for (int s = 1; s <= steps; ++s) {
      const int64_t t = 1000000 + int64_t(s) * 1000;
      const uint64_t a = 0x7f0000200000 + uint64_t(s) * 0x1000000, b = a + 0x800000;
      mem(t + 15, a, 1 << 20);
      mem(t + 25, b, int64_t(s) << 21);  // grows each step: Total Reserved rises
      mem(t + 800, a, -(1 << 20));
      mem(t + 850, b, -(int64_t(s) << 21));
    }
  }
  f.json = "{\n  \"schemaVersion\": 1,\n  \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": " + std::to_string(rank) +
           ", \"world_size\": 2},\n  \"traceEvents\": [" + ev + "\n  ],\n  \"traceName\": \"fixture\"\n}\n";
  return f;
}

}  // namespace memcomm::test
