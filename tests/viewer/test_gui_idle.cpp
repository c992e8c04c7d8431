// Live mode without busy redraws (Note [Idle while listening]): a listening viewer with nothing
// arriving is idle, an arrival wakes it and is drawn, a rank that disconnects stays, marked; and a
// bad stream (oversize frame, version mismatch) is a message in the UI and on stderr.
#include "gui_fixture.hpp"
#include "json_text.hpp"
#include "view_traces.hpp"

#include <memcomm/trace/event.hpp>
#include <memcomm/profiler/stream_protocol.hpp>
#include <memcomm/profiler/stream_sink.hpp>
#include <memcomm/trace/trace_format.hpp>

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

using namespace gui_test;
using namespace memcomm::view;
namespace prof = memcomm::prof;

namespace {

// Step [0, kernels us], `kernels` kernels, one all-reduce: kernels + 2 spans.
std::vector<prof::Event> rank_events(int kernels) {
  std::vector<prof::Event> ev;
  ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeBegin, 0, prof::Phase::Step, 0, 0, 0)));
  for (int k = 0; k < kernels; ++k)
    ev.push_back(prof::Event::from(prof::make_compute(prof::EventKind::Kernel, k * 1000, k * 1000 + 800, 7, 1)));
  ev.push_back(prof::Event::from(
      prof::make_collective(prof::EventKind::CollStart, 10'000, prof::CollOp::AllReduce, prof::DType::F32, 1 << 20, 0, 0)));
  ev.push_back(prof::Event::from(
      prof::make_collective(prof::EventKind::CollEnd, 20'000, prof::CollOp::AllReduce, prof::DType::F32, 1 << 20, 0, 0)));
  ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeEnd, kernels * 1000, prof::Phase::Step, 0, 0, 0)));
  return ev;
}

void stream_rank(std::uint16_t port, std::uint32_t rank, int kernels) {
  view_traces::stream_batch(port, rank, 1, {{1, "gemm_idle"}}, rank_events(kernels));
}

// Up to 30 s, the viewers' --timeout: a viewer started beside CI's other tests (xvfb, two jobs on
// two cores) once took more than 10 s to listen.
int connect_to(std::uint16_t port) {
  for (int attempt = 0; attempt < 300; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}


prof::StreamHello hello(std::uint16_t protocol_version) {
  prof::StreamHello h{};
  std::memcpy(h.magic, prof::kStreamMagic, sizeof h.magic);
  h.protocol_version = protocol_version;
  h.event_version = prof::kEventModelVersion;
  h.rank = 5;
  std::strcpy(h.host, "bad-sender");
  return h;
}

bool any_contains(const nlohmann::json& list, const std::string& what) {
  for (const auto& m : list)
    if (m.get<std::string>().find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("a listening viewer is idle until something arrives and a closed rank stays and is marked", "[gui][viewer]") {
  AppOptions o;
  o.width = 900;
  o.height = 500;
  o.hidden = true;
  o.listen = "127.0.0.1:0";
  App app(o);
  std::string why;
  if (!app.open_window(why)) MEMCOMM_SKIP_TEST(why);
  REQUIRE(app.listen(why));
  frames(app, 4);  // ImGui settles; then nothing changes
  CHECK(app.idle());  // run() sleeps in glfwWaitEvents: no redraw while only listening
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(app.live_wakes() == 0);
  CHECK(app.idle());

  const int kernels = 300;
  stream_rank(app.live_port(), 0, kernels);
  // The waker saw the arrival and woke the (sleeping) UI thread.
  for (int i = 0; i < 500 && app.live_wakes() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(app.live_wakes() > 0);
  // What run() does once woken: frames until idle again (publishes are rate-limited, and the
  // summary refresh skipped by a quick second publish comes within a second).
  const AppState& st = app.state();
  const auto spans = [&] {
    std::uint64_t n = 0;
    for (const auto& rd : st.tl.ranks)
      for (const auto& l : rd.lanes) n += l.span_count();
    return n;
  };
  const auto done = [&] { return spans() == static_cast<std::uint64_t>(kernels) + 2 && !st.tl.ranks[0].connected; };
  for (int i = 0; i < 1000 && !(done() && app.idle()); ++i) {
    app.frame();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(st.tl.ranks.size() == 1);
  CHECK(spans() == static_cast<std::uint64_t>(kernels) + 2);
  CHECK(app.idle());
  CHECK(st.summary.spans == static_cast<std::uint64_t>(kernels) + 2);  // the final summary, not a stale one
  // Disconnected: kept and marked, in the messages and the status line; the rank closed its stream
  // itself, so it ended (See Note [The end of a stream]).
  CHECK_FALSE(st.tl.ranks[0].connected);
  CHECK(st.tl.ranks[0].stream_ended);
  CHECK(any_contains(nlohmann::json(st.messages), "live: rank 0 ended its stream"));
  INFO(st.status_line);
  CHECK(st.status_line.find("ranks 1 (connected 0)") != std::string::npos);
  CHECK(st.status_line.find("drops 0") != std::string::npos);
  CHECK(st.advice.state == AdviceResult::State::Live);
}

TEST_CASE("an oversize frame and a version mismatch are reported in the UI and on stderr", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const int kernels = 50;
  const std::string report = out_dir() + "/live_bad_report.json";
  int rc = -1;
  std::string out;
  const std::uint16_t port = memcomm::test::free_port();
  REQUIRE(port != 0);
  std::thread viewer([&] {
    rc = run_viewer("--listen 127.0.0.1:" + std::to_string(port) + " --exit-after-events " + std::to_string(kernels + 4) +
                        " --timeout 30 --report-json " + report,
                    &out);
  });
  // A failed REQUIRE below throws: join first, so that the test fails instead of aborting on a
  // joinable std::thread. (The viewer exits by itself, at the latest at its --timeout.)
  struct JoinViewer {
    std::thread& t;
    ~JoinViewer() {
      if (t.joinable()) t.join();
    }
  } join_viewer{viewer};
  {  // a frame far over the viewer's 16 MiB limit
    const int fd = connect_to(port);
    REQUIRE(fd >= 0);
    const prof::StreamHello h = hello(prof::kStreamProtocolVersion);
    (void)!write(fd, &h, sizeof h);
    prof::ChunkHeader big{};
    big.magic = prof::kChunkMagic;
    big.raw_size = big.stored_size = 1u << 30;
    big.event_count = (1u << 30) / 32;
    (void)!write(fd, &big, sizeof big);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    close(fd);
  }
  {  // a rank speaking a future protocol version
    const int fd = connect_to(port);
    REQUIRE(fd >= 0);
    const prof::StreamHello h = hello(99);
    (void)!write(fd, &h, sizeof h);
    prof::StreamHelloAck ack{};
    (void)!recv(fd, &ack, sizeof ack, MSG_WAITALL);
    CHECK(ack.status == prof::HelloStatus::VersionMismatch);
    close(fd);
  }
  stream_rank(port, 0, kernels);  // and a good rank is still served
  viewer.join();
  INFO(out);
  REQUIRE(rc == 0);
  const auto j = memcomm::test::read_json(report);
  INFO(j["messages"].dump(2));
  CHECK(any_contains(j["messages"], "exceeds the limit"));
  CHECK(any_contains(j["messages"], "v99"));
  CHECK(out.find("exceeds the limit") != std::string::npos);  // stderr too
  CHECK(out.find("v99") != std::string::npos);
  CHECK(j["live_stats"]["errors"].get<int>() == 2);
  CHECK(j["live_stats"]["received"].get<int>() == kernels + 4);
}

TEST_CASE("a headless viewer waiting for live events draws a few frames a second while none arrive", "[gui][viewer]") {
  // It polled flat out: 90% of a core for nothing, beside the ranks it listened to. Now it sleeps as a
  // window does and wakes four times a second to check --timeout.
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const std::string report = out_dir() + "/live_quiet_report.json";
  const std::uint16_t port = memcomm::test::free_port();
  REQUIRE(port != 0);
  std::string out;
  const int rc = run_viewer("--listen 127.0.0.1:" + std::to_string(port) +
                                " --exit-after-events 1000 --timeout 3 --report-json " + report,
                            &out);
  INFO(out);
  CHECK(rc == 1);  // timed out, with nothing received
  CHECK(out.find("timed out after 3 s with 0 of 1000 events") != std::string::npos);
  const auto j = memcomm::test::read_json(report);
  INFO(j.dump(2));
  CHECK(j["frames"].get<int>() <= 40);  // 3 s at 4 wakes a second, and the first frames
}
