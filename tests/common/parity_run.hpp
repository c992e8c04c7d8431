// A two-rank run written by the tests that hold the viewer's figures to memcomm-trace report's
// (Note [One analysis engine] in memcomm/trace/analysis.hpp). Times in ns; rank r, step s = 1..8
// from t = s x 10 ms (+ 50 us x r):
//   step [0, 9.5 ms] (id s)   data_wait [0, 0.3 + 0.1 r]   forward [0.5, 3]   backward [3, 7]
//   optimizer [8.2, 9]; in step 8 also eval [9, 9.4] with a broadcast inside it (eval is compute);
//   in odd steps a comm phase [6.2, 7] inside backward (DDP's wait for its buckets, as Python records it)
//   all_reduce seq 2s, 32 MiB: start 5 ms (+0.2 ms on rank s % 2: the straggler alternates), end 7.5 + 0.1 r
//   all_gather seq 2s+1, 8 MiB: [7.6, 8.2 + 0.05 r], after backward, so all of it is exposed
//   memory: a 64 MiB segment, then per step an alloc of (r+1) x s MiB at 1 ms freed at 8.5 ms
// With `kernels`, a GPU run: kernels (none of them communication kernels) under forward/backward.
// Rank 1 records a clock offset of +500 ns and writes its events 500 ns early; both ranks name
// their communicator in a CommInfo (2 ranks).
#pragma once

#include <memcomm/trace/trace_writer.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace parity_run {

namespace prof = memcomm::prof;

inline std::vector<prof::Event> rank_events(std::uint32_t rank, bool kernels) {
  const std::int64_t skew = rank == 1 ? -500 : 0;  // written on rank 1's (earlier) clock
  std::vector<prof::Event> v;
  const auto at = [&](std::int64_t base, double ms) { return base + static_cast<std::int64_t>(ms * 1e6) + skew; };
  const auto range = [&](prof::EventKind k, std::int64_t ts, prof::Phase p, std::uint64_t id) {
    v.push_back(prof::Event::from(prof::make_range(k, ts, p, 0, id, 0)));
  };
  const auto span = [&](std::int64_t base, prof::Phase p, double b, double e, std::uint64_t id) {
    range(prof::EventKind::RangeBegin, at(base, b), p, id);
    range(prof::EventKind::RangeEnd, at(base, e), p, id);
  };
  const auto coll = [&](std::int64_t base, prof::CollOp op, std::uint64_t bytes, std::uint32_t seq, double b, double e) {
    for (auto [k, t] : {std::pair{prof::EventKind::CollEnqueue, b - 0.05}, {prof::EventKind::CollStart, b}, {prof::EventKind::CollEnd, e}})
      v.push_back(prof::Event::from(prof::make_collective(k, at(base, t), op, prof::DType::F32, bytes, 0, seq, 0)));
  };
  v.push_back(prof::Event::from(prof::make_meta(skew, prof::MetaKey::Rank, rank)));
  v.push_back(prof::Event::from(prof::make_meta(skew, prof::MetaKey::WorldSize, 2)));
  v.push_back(prof::Event::from(prof::make_meta(skew, prof::MetaKey::ClockOffset, rank == 1 ? 500 : 0)));
  v.push_back(prof::Event::from(prof::make_comm_info(skew, 0, 2, static_cast<std::uint16_t>(rank), 0xABCDEF)));
  v.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::SegmentAlloc, at(0, 1), 0x100000, 64u << 20)));
  for (std::uint32_t s = 1; s <= 8; ++s) {
    const std::int64_t t0 = static_cast<std::int64_t>(s) * 10'000'000 + 50'000 * static_cast<std::int64_t>(rank);
    const double r = rank;
    span(t0, prof::Phase::Step, 0, 9.5, s);
    span(t0, prof::Phase::DataWait, 0, 0.3 + 0.1 * r, s);
    span(t0, prof::Phase::Forward, 0.5, 3, s);
    if (s % 2 == 1) span(t0, prof::Phase::Comm, 6.2, 7, s);  // before backward's: ends first at 7 ms
    span(t0, prof::Phase::Backward, 3, 7, s);
    span(t0, prof::Phase::Optimizer, 8.2, 9, s);
    if (kernels)
      for (int k = 0; k < 6; ++k)
        v.push_back(prof::Event::from(prof::make_compute(prof::EventKind::Kernel, at(t0, 0.6 + k), at(t0, 1.3 + k), 7, 1)));
    coll(t0, prof::CollOp::AllReduce, 32u << 20, 2 * s, 5 + (s % 2 == rank ? 0.2 : 0), 7.5 + 0.1 * r);
    coll(t0, prof::CollOp::AllGather, 8u << 20, 2 * s + 1, 7.6, 8.2 + 0.05 * r);
    if (s == 8) {
      span(t0, prof::Phase::Eval, 9, 9.4, s);
      coll(t0, prof::CollOp::Broadcast, 4u << 20, 100, 9.1, 9.3);
    }
    const std::uint64_t addr = 0x100000 + (std::uint64_t{s} << 20), bytes = (rank + 1ull) * s << 20;
    v.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::Alloc, at(t0, 1), addr, bytes)));
    v.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::FreeRequested, at(t0, 8.5), addr, bytes)));
    v.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::FreeCompleted, at(t0, 8.5), addr, bytes)));
  }
  // In time order, as a recorder writes them (ties keep the order above: an end before the next begin).
  std::stable_sort(v.begin(), v.end(), [](const prof::Event& a, const prof::Event& b) { return a.ts < b.ts; });
  return v;
}

// Writes stem.rank0.mct and stem.rank1.mct; returns their paths.
inline std::vector<std::string> write(const std::string& stem, bool kernels = false) {
  std::vector<std::string> files;
  for (std::uint32_t r = 0; r < 2; ++r) {
    prof::WriterOptions o;
    o.rank = r;
    o.world_size = 2;
    files.push_back(stem + ".rank" + std::to_string(r) + ".mct");
    prof::TraceWriter w(files.back(), o);
    w.write_chunk({{1, "gemm"}}, rank_events(r, kernels));
    w.close();
  }
  return files;
}

}  // namespace parity_run
