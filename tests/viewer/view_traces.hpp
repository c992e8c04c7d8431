// .mct traces written by the viewer's app tests (advice, File > Open, drag-and-drop, range prompt).
#pragma once

#include "gui_fixture.hpp"

#include <memcomm/profiler/stream_sink.hpp>
#include <memcomm/trace/trace_writer.hpp>

#include <string>
#include <vector>

namespace view_traces {

namespace prof = memcomm::prof;

// One rank, 100 steps of 10 ms from t = 0, each [s*10 ms, s*10 ms + 9 ms] with 10 "gemm" kernels:
// 1100 spans.
inline std::string write_steps(const std::string& path) {
  prof::WriterOptions o;
  o.rank = 0;
  prof::TraceWriter w(path, o);
  const std::vector<prof::StringDef> defs = {{1, "gemm"}};
  std::vector<prof::Event> ev;
  for (int s = 0; s < 100; ++s) {
    const std::int64_t t = static_cast<std::int64_t>(s) * 10'000'000;
    ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeBegin, t, prof::Phase::Step, 0, s, 0)));
    for (int k = 0; k < 10; ++k)
      ev.push_back(prof::Event::from(prof::make_compute(prof::EventKind::Kernel, t + k * 800'000, t + k * 800'000 + 500'000, 7, 1)));
    ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeEnd, t + 9'000'000, prof::Phase::Step, 0, s, 0)));
  }
  w.write_chunk(defs, ev);
  w.close();
  return path;
}

// A CPU run of two ranks, one file each (stem.rank0.mct, stem.rank1.mct), 10 steps of 10 ms:
// forward [0, 3 ms), backward [3, 7 ms), then a 64 MiB all-reduce from 7 ms (rank 1: 7.1 ms) to
// 9.9 ms that nothing overlaps, so ~29% of every step is exposed communication. Rank 0 also holds
// three memcomm-tune probes as its tune.* counters: micro-batch 8 (fits, 100 MiB, 12.5 ms),
// 16 (fits, 180 MiB, 20 ms), 32 (OOM).
inline std::vector<std::string> write_exposed_run(const std::string& stem) {
  std::vector<std::string> files;
  for (std::uint32_t r = 0; r < 2; ++r) {
    const std::string path = stem + ".rank" + std::to_string(r) + ".mct";
    prof::WriterOptions o;
    o.rank = r;
    o.world_size = 2;
    prof::TraceWriter w(path, o);
    const std::vector<prof::StringDef> defs = {
        {2, "tune.micro_batch"}, {3, "tune.oom"}, {4, "tune.peak_reserved"}, {5, "tune.step_ms"}};
    std::vector<prof::Event> ev;
    const auto range = [&](prof::EventKind k, std::int64_t ts, prof::Phase p, std::uint64_t id) {
      ev.push_back(prof::Event::from(prof::make_range(k, ts, p, 0, id, 0)));
    };
    for (std::uint32_t s = 0; s < 10; ++s) {
      const std::int64_t t = static_cast<std::int64_t>(s) * 10'000'000;
      range(prof::EventKind::RangeBegin, t, prof::Phase::Step, s);
      range(prof::EventKind::RangeBegin, t, prof::Phase::Forward, s);
      range(prof::EventKind::RangeEnd, t + 3'000'000, prof::Phase::Forward, s);
      range(prof::EventKind::RangeBegin, t + 3'000'000, prof::Phase::Backward, s);
      range(prof::EventKind::RangeEnd, t + 7'000'000, prof::Phase::Backward, s);
      ev.push_back(prof::Event::from(prof::make_collective(prof::EventKind::CollStart, t + 7'000'000 + r * 100'000,
                                                           prof::CollOp::AllReduce, prof::DType::F32, 64ull << 20, 0, s + 1)));
      ev.push_back(prof::Event::from(prof::make_collective(prof::EventKind::CollEnd, t + 9'900'000, prof::CollOp::AllReduce,
                                                           prof::DType::F32, 64ull << 20, 0, s + 1)));
      range(prof::EventKind::RangeEnd, t + 10'000'000, prof::Phase::Step, s);
    }
    if (r == 0) {
      const std::int64_t t = 120'000'000;
      const auto counter = [&](std::int64_t ts, prof::StringId name, double v) {
        ev.push_back(prof::Event::from(prof::make_counter(ts, name, v)));
      };
      counter(t, 2, 8), counter(t + 1, 3, 0), counter(t + 2, 4, 100.0 * (1 << 20)), counter(t + 3, 5, 12.5);
      counter(t + 1000, 2, 16), counter(t + 1001, 3, 0), counter(t + 1002, 4, 180.0 * (1 << 20)), counter(t + 1003, 5, 20);
      counter(t + 2000, 2, 32), counter(t + 2001, 3, 1);
    }
    w.write_chunk(defs, ev);
    w.close();
    files.push_back(path);
  }
  return files;
}

// Streams `ev` (with `strings`) live as rank `rank` of `world` to a viewer listening on
// 127.0.0.1:port, then closes the stream; returns what the sink sent and dropped.
inline prof::StreamStats stream_batch(std::uint16_t port, std::uint32_t rank, std::uint32_t world,
                                      const std::vector<prof::StringDef>& strings, const std::vector<prof::Event>& ev) {
  prof::StreamOptions so;
  so.endpoint = prof::parse_endpoint("127.0.0.1:" + std::to_string(port));
  so.rank = rank;
  so.world_size = world;
  so.quiet = true;
  prof::StreamSink sink(so);
  prof::Batch b;
  b.strings = strings.data();
  b.n_strings = strings.size();
  b.events = ev.data();
  b.n_events = ev.size();
  sink.consume(b);
  sink.close(5000);
  return sink.stats();
}

}  // namespace view_traces
