// A hand-built two-rank CPU run whose analysis is known exactly (times in ns).
//
//   rank r, step 0 = [0, 10 ms]:
//     data_wait [0, 0.5]  forward [0.5, 3]  backward [3, 8]  optimizer [8, 9]     (ms)
//     all_reduce seq 0, 100e6 bytes, f32, bucket 0: start 5 ms (rank 0) / 6 ms (rank 1), end 9.5 ms
//   rank 0 memory: segment 4096 B at 0.2 ms; alloc 1000 at 1 ms, 2000 at 2 ms; free 1000 at 4 ms
//   rank 1 has a clock offset of +1000 ns recorded, and its events are written 1000 ns early.
#pragma once

#include <vector>

#include "memcomm/trace/trace_writer.hpp"

namespace memcomm::prof::test {

constexpr int64_t kMs = 1'000'000;

inline std::vector<Event> synthetic_rank(int rank) {
  const int64_t skew = rank == 1 ? -1000 : 0;  // written on rank 1's (earlier) clock
  auto T = [&](double ms) { return int64_t(ms * double(kMs)) + skew; };
  std::vector<Event> v;
  v.push_back(Event::from(make_meta(T(0), MetaKey::Rank, rank)));
  v.push_back(Event::from(make_meta(T(0), MetaKey::WorldSize, 2)));
  v.push_back(Event::from(make_meta(T(0), MetaKey::Host, 0, 3)));
  v.push_back(Event::from(make_meta(T(0), MetaKey::ClockOffset, rank == 1 ? 1000 : 0)));
  v.push_back(Event::from(make_comm_info(T(0), 0, 2, uint16_t(rank), 0xC0FFEE)));
  v.push_back(Event::from(make_range(EventKind::RangeBegin, T(0), Phase::Step, 0, 0, 0)));
  v.push_back(Event::from(make_range(EventKind::RangeBegin, T(0), Phase::DataWait, 0, 0, 0)));
  v.push_back(Event::from(make_range(EventKind::RangeEnd, T(0.5), Phase::DataWait, 0, 0, 0)));
  v.push_back(Event::from(make_range(EventKind::RangeBegin, T(0.5), Phase::Forward, 0, 0, 0)));
  v.push_back(Event::from(make_range(EventKind::RangeEnd, T(3), Phase::Forward, 0, 0, 0)));
  v.push_back(Event::from(make_range(EventKind::RangeBegin, T(3), Phase::Backward, 0, 0, 0)));
  v.push_back(Event::from(make_collective(EventKind::CollEnqueue, T(rank == 0 ? 4.9 : 5.9), CollOp::AllReduce, DType::F32,
                                          100'000'000, 0, 0, 0)));
  v.push_back(Event::from(make_collective(EventKind::CollStart, T(rank == 0 ? 5 : 6), CollOp::AllReduce, DType::F32,
                                          100'000'000, 0, 0, 0)));
  v.push_back(Event::from(make_range(EventKind::RangeEnd, T(8), Phase::Backward, 0, 0, 0)));
  v.push_back(Event::from(make_range(EventKind::RangeBegin, T(8), Phase::Optimizer, 0, 0, 0)));
  v.push_back(Event::from(make_range(EventKind::RangeEnd, T(9), Phase::Optimizer, 0, 0, 0)));
  v.push_back(Event::from(make_collective(EventKind::CollEnd, T(9.5), CollOp::AllReduce, DType::F32, 100'000'000, 0, 0, 0)));
  v.push_back(Event::from(make_range(EventKind::RangeEnd, T(10), Phase::Step, 0, 0, 0)));
  v.push_back(Event::from(make_counter(T(10), 4, 0.5)));
  if (rank == 0) {
    v.push_back(Event::from(make_mem_block(EventKind::SegmentAlloc, T(0.2), 0x1000, 4096)));
    v.push_back(Event::from(make_mem_block(EventKind::Alloc, T(1), 0x1000, 1000)));
    v.push_back(Event::from(make_mem_block(EventKind::Alloc, T(2), 0x1400, 2000)));
    v.push_back(Event::from(make_mem_block(EventKind::FreeRequested, T(4), 0x1000, 1000)));
    v.push_back(Event::from(make_mem_block(EventKind::FreeCompleted, T(4), 0x1000, 1000)));
  }
  return v;
}

inline std::vector<StringDef> synthetic_strings() { return {{3, "node-a"}, {4, "loss"}}; }

// Writes NAME.rank0.mct and NAME.rank1.mct; returns their paths.
inline std::vector<std::string> write_synthetic_run(const std::string& base) {
  std::vector<std::string> paths;
  for (int rank : {0, 1}) {
    WriterOptions o;
    o.rank = uint32_t(rank);
    o.world_size = 2;
    const std::string p = base + ".rank" + std::to_string(rank) + ".mct";
    TraceWriter w(p, o);
    w.write_chunk(synthetic_strings(), synthetic_rank(rank));
    paths.push_back(p);
  }
  return paths;
}

}  // namespace memcomm::prof::test
