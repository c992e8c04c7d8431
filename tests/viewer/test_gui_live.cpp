// Live mode: memcomm-view --listen receives two ranks streamed through the profiler's StreamSink
// (what memcomm-train --live uses), survives garbage on the socket, and reports every event with
// no drops.
#include "gui_fixture.hpp"
#include "json_text.hpp"
#include "view_traces.hpp"

#include <memcomm/profiler/stream_sink.hpp>

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

using namespace gui_test;
namespace prof = memcomm::prof;

namespace {

// Sends garbage to the viewer once it listens (retrying the connect until it does).
void send_garbage(std::uint16_t port) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      const std::string junk(300, 'G');
      (void)!send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);  // a viewer that hung up is no SIGPIPE here
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      close(fd);
      return;
    }
    close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::vector<prof::Event> rank_events(std::uint32_t rank, int kernels) {
  std::vector<prof::Event> ev;
  ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeBegin, 0, prof::Phase::Step, 0, 0, 0)));
  for (int k = 0; k < kernels; ++k)
    ev.push_back(prof::Event::from(prof::make_compute(prof::EventKind::Kernel, k * 1000, k * 1000 + 800, 7, 1)));
  ev.push_back(prof::Event::from(prof::make_collective(prof::EventKind::CollStart, 10'000 + rank * 500, prof::CollOp::AllReduce,
                                                       prof::DType::F32, 1 << 20, 0, 0)));
  ev.push_back(prof::Event::from(prof::make_collective(prof::EventKind::CollEnd, 20'000, prof::CollOp::AllReduce,
                                                       prof::DType::F32, 1 << 20, 0, 0)));
  ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeEnd, kernels * 1000, prof::Phase::Step, 0, 0, 0)));
  // Three blocks of (rank + 1) MiB live together at 3,000 ns, the first freed after; the allocations
  // pane folds them (Note [Live allocations]).
  const std::uint64_t mib = (rank + 1ull) << 20;
  for (std::uint64_t b = 0; b < 3; ++b)
    ev.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::Alloc, 1000 + 1000 * static_cast<std::int64_t>(b),
                                                        0x10000000 + b * mib, mib)));
  ev.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::FreeRequested, 5000, 0x10000000, mib)));
  ev.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::FreeCompleted, 5000, 0x10000000, mib)));
  return ev;
}

}  // namespace

TEST_CASE("live: two ranks stream into memcomm-view while garbage is refused and nothing is dropped", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const auto port = static_cast<std::uint16_t>(20000 + getpid() % 20000);
  const int kernels = 2000;
  const std::size_t per_rank = static_cast<std::size_t>(kernels) + 4 + 5, total = 2 * per_rank;
  const std::string report = out_dir() + "/live_report.json";
  int rc = -1;
  std::string out;
  std::thread viewer([&] {
    rc = run_viewer("--listen 127.0.0.1:" + std::to_string(port) + " --exit-after-events " + std::to_string(total) +
                        " --timeout 30 --report-json " + report,
                    &out);
  });
  send_garbage(port);
  for (std::uint32_t rank = 0; rank < 2; ++rank) {
    const prof::StreamStats st = view_traces::stream_batch(port, rank, 2, {{1, "gemm_live"}}, rank_events(rank, kernels));
    CHECK(st.dropped_events == 0);
    CHECK(st.sent_events == per_rank);
  }
  viewer.join();
  INFO(out);
  REQUIRE(rc == 0);
  const auto j = memcomm::test::read_json(report);
  INFO(j.dump(2));
  CHECK(j["live_stats"]["received"].get<std::size_t>() == total);
  CHECK(j["live_stats"]["queue_dropped"].get<std::size_t>() == 0);
  CHECK(j["live_stats"]["errors"].get<std::size_t>() >= 1);  // the garbage connection
  CHECK(j["drops"].get<std::size_t>() == 0);
  REQUIRE(j["ranks"].size() == 2);
  for (const auto& r : j["ranks"]) {
    CHECK(r["spans"].get<std::size_t>() == static_cast<std::size_t>(kernels) + 2);  // kernels, the step, the collective
    CHECK(r["collectives"].get<std::size_t>() == 1);
  }
  // The memory rank's allocations, live mode's too: rank 0's three blocks of 1 MiB at its peak.
  CHECK(j["memory_at"]["allocations"].get<std::size_t>() == 3);
  CHECK(j["memory_at"]["peak"]["live_bytes"].get<std::uint64_t>() == 3ull << 20);
  bool garbage_reported = false;
  for (const auto& m : j["messages"]) garbage_reported = garbage_reported || m.get<std::string>().find("live:") == 0;
  CHECK(garbage_reported);
}
