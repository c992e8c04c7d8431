// Hand-built events and temp paths shared by the profiler tests.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "memcomm/trace/event.hpp"
#include "memcomm/trace/trace_writer.hpp"

namespace memcomm::prof::test {

// A unique path under $TMPDIR (or /tmp); removed by the caller.
inline std::string temp_path(const std::string& stem) {
  const char* dir = std::getenv("TMPDIR");
  static int counter = 0;
  return std::string(dir ? dir : "/tmp") + "/memcomm_" + stem + "_" + std::to_string(::getpid()) + "_" +
         std::to_string(counter++) + ".mct";
}

// One event of every kind, with distinctive field values (names use string ids 1..3).
inline std::vector<Event> one_of_every_kind() {
  std::vector<Event> v;
  int64_t t = 1'000;
  for (EventKind k : {EventKind::Alloc, EventKind::FreeRequested, EventKind::FreeCompleted, EventKind::SegmentAlloc,
                      EventKind::SegmentFree, EventKind::SegmentMap, EventKind::SegmentUnmap})
    v.push_back(Event::from(make_mem_block(k, t += 10, 0x7f12'3456'7800ull + uint64_t(k), (5ull << 32) + 512 * uint64_t(k),
                                           1, 2, MemCategory::Gradient)));
  OomEvent oom{};
  oom.ts = t += 10;
  oom.kind = EventKind::Oom;
  oom.device = 1;
  oom.requested = 123456789;
  v.push_back(Event::from(oom));
  v.push_back(Event::from(make_mem_sample(t += 10, MemMetric::Fragmentation, 250000, 1)));
  for (EventKind k : {EventKind::CollEnqueue, EventKind::CollStart, EventKind::CollEnd}) {
    auto c = make_collective(k, t += 10, CollOp::AllReduce, DType::BF16, (3ull << 32) + 77, 2, 41, 7);
    c.set_algo_proto(CollAlgo::Ring, CollProto::LL128);
    v.push_back(Event::from(c));
  }
  t += 10;
  v.push_back(Event::from(make_compute(EventKind::Kernel, t, t + 5000, 3, 1, 99, 1, 0)));
  t += 10;
  v.push_back(Event::from(make_compute(EventKind::Memcpy, t, t + 700, 4, encode_bytes32(1 << 20), 100, 1,
                                       uint8_t(CopyKind::HtoD))));
  t += 10;
  v.push_back(Event::from(make_compute(EventKind::Memset, t, t + 50, 4, encode_bytes32(4096), 101, 1)));
  t += 10;
  v.push_back(Event::from(make_host_span(EventKind::Launch, t, t + 3, 300, 1, 99)));
  t += 10;
  v.push_back(Event::from(make_host_span(EventKind::Sync, t, t + 30, 300, 2)));
  v.push_back(Event::from(make_range(EventKind::RangeBegin, t += 10, Phase::Forward, 2, 17, 5)));
  v.push_back(Event::from(make_range(EventKind::RangeEnd, t += 10, Phase::Forward, 2, 17, 5)));
  v.push_back(Event::from(make_counter(t += 10, 3, 0.125)));
  v.push_back(Event::from(make_meta(t += 10, MetaKey::ClockOffset, -4242)));
  v.push_back(Event::from(make_comm_info(t += 10, 2, 8, 3, 0xABCDEF0123456789ull)));
  DropEvent d{};
  d.ts = t += 10;
  d.kind = EventKind::Drops;
  d.thread = 9;
  d.count = 31;
  v.push_back(Event::from(d));
  return v;
}

inline std::vector<StringDef> fixture_strings() {
  return {{1, "volta_sgemm_128x64_nn"}, {2, "forward"}, {3, "loss"}};
}

}  // namespace memcomm::prof::test
