// Live stream: round trip, slow/absent viewer (counted drops, unblocked producer), garbage and
// oversize frames, version mismatch on both sides, reconnect, byte-by-byte decoding, a connection
// decoded with no socket.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "memcomm/profiler/recorder.hpp"
#include "memcomm/profiler/stream_receiver.hpp"
#include "memcomm/profiler/stream_sink.hpp"
#include "memcomm_test.hpp"

using namespace memcomm::prof;
using namespace std::chrono_literals;

namespace {

ReceiverOptions quiet_receiver() {
  ReceiverOptions o;
  o.endpoint = {"127.0.0.1", 0};
  o.quiet = true;
  return o;
}
StreamOptions sink_options(uint16_t port) {
  StreamOptions o;
  o.endpoint = {"127.0.0.1", port};
  o.rank = 3;
  o.world_size = 4;
  o.quiet = true;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 100;
  return o;
}

// Polls until pred(messages) holds or ~20 s pass (a bound for hung tests, not a timing check).
template <class Pred>
std::vector<LiveMessage> poll_until(StreamReceiver& rx, std::vector<LiveMessage>& all, Pred pred) {
  for (int i = 0; i < 2000 && !pred(all); ++i) {
    rx.poll(all);
    std::this_thread::sleep_for(10ms);
  }
  return all;
}
size_t count_events(const std::vector<LiveMessage>& m, EventKind kind) {
  size_t n = 0;
  for (auto& x : m)
    for (auto& e : x.events) n += e.kind == kind;
  return n;
}
bool has_type(const std::vector<LiveMessage>& m, LiveMessage::Type t) {
  for (auto& x : m)
    if (x.type == t) return true;
  return false;
}

int raw_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}
StreamHello good_hello() {
  StreamHello h{};
  std::memcpy(h.magic, kStreamMagic, sizeof h.magic);
  h.protocol_version = kStreamProtocolVersion;
  h.event_version = kEventModelVersion;
  h.rank = 0;
  std::strcpy(h.host, "test");
  return h;
}

// A rank that records `n` counters, streams them to the receiver on `port` and closes its stream;
// returns its sink's figures.
StreamStats record_counters(uint16_t port, int n) {
  Recorder rec;
  auto sink = std::make_shared<StreamSink>(sink_options(port));
  rec.add_sink(sink);
  rec.start();
  for (int i = 0; i < n; ++i) rec.record(make_counter(i, 0, i));
  rec.stop();
  sink->close(5000);
  return sink->stats();
}

// A raw listening socket on a free loopback port, for tests that play a misbehaving viewer.
struct FakeViewerSocket {
  int fd;
  uint16_t port;
};
FakeViewerSocket fake_viewer_socket() {
  StreamReceiver dummy(quiet_receiver());  // only to find a free port quickly
  dummy.start();
  const uint16_t port = dummy.port();
  dummy.stop();
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(lfd, 4) == 0);
  return {lfd, port};
}

}  // namespace

TEST_CASE("endpoints default to loopback and reject bad ports", "[profiler][stream]") {
  CHECK(parse_endpoint("").host == "127.0.0.1");
  CHECK(parse_endpoint(":9000").port == 9000);
  CHECK(parse_endpoint("9000").host == "127.0.0.1");
  CHECK(parse_endpoint("viewer.example:7000").host == "viewer.example");
  CHECK(parse_endpoint("[::1]:7000").host == "::1");
  CHECK_THROWS_WITH(parse_endpoint("host:99999"), Catch::Contains("bad port"));
  CHECK_THROWS_WITH(parse_endpoint("host:abc"), Catch::Contains("bad port"));
  CHECK_THROWS_WITH(parse_endpoint("host:"), Catch::Contains("no port after ':'"));
  CHECK(parse_endpoint(":0").port == 0);  // listen on any free port
}

TEST_CASE("an address to connect to needs a port from 1 to 65535", "[profiler][stream]") {
  CHECK(parse_connect_endpoint(":7433").host == "127.0.0.1");
  CHECK(parse_connect_endpoint("viewer.example:7000").port == 7000);
  CHECK(parse_connect_endpoint("[::1]:7000").host == "::1");
  for (const char* bad : {"", "host", "7433", "[::1]", "host:", "[::1]:", "host:0", "host:65536", "host:x", "::1", "::1:7433"})
    CHECK_THROWS_AS(parse_connect_endpoint(bad), TraceError);
  CHECK_THROWS_WITH(parse_connect_endpoint("host"), Catch::Contains("expected HOST:PORT"));
  CHECK_THROWS_WITH(parse_connect_endpoint("host:0"), Catch::Contains("expected 1-65535"));
  CHECK_THROWS_WITH(parse_connect_endpoint("host:99999"), Catch::Contains("expected 1-65535"));  // one range told
}

TEST_CASE("loopback hosts", "[profiler][stream]") {
  CHECK(is_loopback_host("127.0.0.1"));
  CHECK(is_loopback_host("localhost"));
  CHECK_FALSE(is_loopback_host("10.0.0.2"));
}

TEST_CASE("events recorded on a rank arrive at the receiver with names and identity", "[profiler][stream]") {
  StreamReceiver rx(quiet_receiver());
  rx.start();
  Recorder rec;
  auto sink = std::make_shared<StreamSink>(sink_options(rx.port()));
  rec.add_sink(sink);
  rec.start();
  const Name loss = rec.name("loss");
  for (int i = 0; i < 20000; ++i) record_counter(rec, loss, i);
  rec.stop();
  sink->close(5000);
  std::vector<LiveMessage> all;
  poll_until(rx, all, [](auto& m) { return count_events(m, EventKind::Counter) >= 20000; });
  CHECK(count_events(all, EventKind::Counter) == 20000);
  REQUIRE(has_type(all, LiveMessage::Type::Connected));
  CHECK(all.front().rank == 3);
  CHECK(all.front().world_size == 4);
  bool named = false;
  for (auto& m : all)
    for (auto& [id, text] : m.strings) named |= id == loss.id && text == "loss";
  CHECK(named);
  CHECK(sink->stats().dropped_events == 0);
  CHECK(sink->stats().sent_events >= 20000);
}

TEST_CASE("a viewer that never reads causes counted drops, not a blocked producer", "[profiler][stream]") {
  // A fake viewer: accepts, answers the handshake, then never reads again.
  const FakeViewerSocket sock = fake_viewer_socket();
  const int lfd = sock.fd;
  const uint16_t port = sock.port;
  int rcv = 4096;
  std::thread fake([&] {
    const int fd = ::accept(lfd, nullptr, nullptr);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    StreamHello h;
    ::recv(fd, &h, sizeof h, MSG_WAITALL);
    StreamHelloAck ack{};
    std::memcpy(ack.magic, kStreamMagic, sizeof ack.magic);
    ack.protocol_version = kStreamProtocolVersion;
    ack.event_version = kEventModelVersion;
    ack.max_frame_bytes = 1 << 20;
    ::send(fd, &ack, sizeof ack, 0);
    std::this_thread::sleep_for(3s);  // never reads
    ::close(fd);
  });
  RecorderOptions ro;
  ro.ring_events = 1 << 21;
  Recorder rec(ro);
  StreamOptions so = sink_options(port);
  so.max_queued_events = 10000;
  so.send_timeout_ms = 200;
  auto sink = std::make_shared<StreamSink>(so);
  rec.add_sink(sink);
  rec.start();
  constexpr int kEvents = 1'000'000;
  for (int i = 0; i < kEvents; ++i) rec.record(make_counter(i, 0, i));
  rec.stop();
  const StreamStats st = sink->stats();
  CHECK(st.dropped_events > 0);
  CHECK(st.sent_events + st.dropped_events <= rec.stats().recorded);
  CHECK(rec.stats().dropped == 0);  // the collector never waited on the stream
  sink->close(0);
  fake.join();
  ::close(lfd);
}

TEST_CASE("with no viewer at all, recording continues and drops are counted", "[profiler][stream]") {
  StreamReceiver dummy(quiet_receiver());
  dummy.start();
  const uint16_t port = dummy.port();
  dummy.stop();  // nobody listens there now
  Recorder rec;
  StreamOptions so = sink_options(port);
  so.max_queued_events = 1000;
  auto sink = std::make_shared<StreamSink>(so);
  rec.add_sink(sink);
  rec.start();
  for (int i = 0; i < 5000; ++i) rec.record(make_counter(i, 0, i));
  rec.stop();
  // The sender thread tries to connect on its own schedule: wait (bounded) for its first failure.
  StreamStats st = sink->stats();
  for (int i = 0; i < 500 && st.last_error.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = sink->stats();
  }
  CHECK_FALSE(st.connected);
  CHECK(st.dropped_events >= 4000);
  CHECK(st.last_error.find("cannot connect") != std::string::npos);
  CHECK(rec.stats().dropped == 0);
  // What was still queued at close never left either: every event is sent or counted as dropped
  // (a run's end said "0 dropped" of a stream no viewer ever saw).
  sink->close(0);
  st = sink->stats();
  CHECK(st.sent_events == 0);
  CHECK(st.dropped_events == rec.stats().recorded);  // the counters and the recorder's own metadata
}

TEST_CASE("garbage and oversize frames drop that connection and the receiver keeps serving", "[profiler][stream]") {
  StreamReceiver rx(quiet_receiver());
  rx.start();
  std::vector<LiveMessage> all;
  {
    const int fd = raw_connect(rx.port());
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    ::send(fd, junk, sizeof junk, 0);
    poll_until(rx, all, [](auto& m) { return has_type(m, LiveMessage::Type::Error); });
    ::close(fd);
  }
  REQUIRE(has_type(all, LiveMessage::Type::Error));
  CHECK(all.back().text.find("not a memcomm live stream") != std::string::npos);
  all.clear();
  {
    const int fd = raw_connect(rx.port());
    const StreamHello h = good_hello();
    ::send(fd, &h, sizeof h, 0);
    ChunkHeader big{};
    big.magic = kChunkMagic;
    big.raw_size = 1u << 30;
    big.stored_size = 1u << 30;
    big.event_count = (1u << 30) / 24;
    ::send(fd, &big, sizeof big, 0);
    poll_until(rx, all, [](auto& m) { return has_type(m, LiveMessage::Type::Error); });
    ::close(fd);
  }
  bool oversize = false;
  for (auto& m : all) oversize |= m.type == LiveMessage::Type::Error && m.text.find("exceeds the limit") != std::string::npos;
  CHECK(oversize);
  CHECK(rx.stats().errors == 2);
  // Still serving real ranks.
  all.clear();
  record_counters(rx.port(), 100);
  poll_until(rx, all, [](auto& m) { return count_events(m, EventKind::Counter) >= 100; });
  CHECK(count_events(all, EventKind::Counter) == 100);
}

TEST_CASE("a version mismatch gives a clear message on both sides", "[profiler][stream]") {
  StreamReceiver rx(quiet_receiver());
  rx.start();
  // Rank side speaking a future version: the receiver refuses and says why.
  const int fd = raw_connect(rx.port());
  StreamHello h = good_hello();
  h.protocol_version = 99;
  ::send(fd, &h, sizeof h, 0);
  StreamHelloAck ack{};
  REQUIRE(::recv(fd, &ack, sizeof ack, MSG_WAITALL) == sizeof ack);
  CHECK(ack.status == HelloStatus::VersionMismatch);
  CHECK(std::string(ack.message).find("version mismatch") != std::string::npos);
  ::close(fd);
  std::vector<LiveMessage> all;
  poll_until(rx, all, [](auto& m) { return has_type(m, LiveMessage::Type::Error); });
  REQUIRE(has_type(all, LiveMessage::Type::Error));
  CHECK(all.back().text.find("speaks live protocol v99") != std::string::npos);
  rx.stop();

  // Viewer side refusing: the sink records the reason and stops retrying.
  const FakeViewerSocket sock = fake_viewer_socket();
  const int lfd = sock.fd;
  const uint16_t port = sock.port;
  std::thread fake([&] {
    const int c = ::accept(lfd, nullptr, nullptr);
    StreamHello in;
    ::recv(c, &in, sizeof in, MSG_WAITALL);
    StreamHelloAck no{};
    std::memcpy(no.magic, kStreamMagic, sizeof no.magic);
    no.protocol_version = 2;
    no.event_version = kEventModelVersion;
    no.status = HelloStatus::VersionMismatch;
    std::strcpy(no.message, "version mismatch: viewer speaks protocol v2");
    ::send(c, &no, sizeof no, 0);
    ::close(c);
  });
  StreamSink sink(sink_options(port));
  for (int i = 0; i < 500 && !sink.stats().version_mismatch; ++i) std::this_thread::sleep_for(10ms);
  const StreamStats st = sink.stats();
  CHECK(st.version_mismatch);
  CHECK(st.last_error.find("protocol v2") != std::string::npos);
  CHECK(st.last_error.find("this rank: protocol v1") != std::string::npos);
  sink.close(0);
  fake.join();
  ::close(lfd);
}

TEST_CASE("a rank reconnects to a restarted viewer and resends its string table", "[profiler][stream]") {
  auto rx = std::make_unique<StreamReceiver>(quiet_receiver());
  rx->start();
  const uint16_t port = rx->port();
  Recorder rec;
  auto sink = std::make_shared<StreamSink>(sink_options(port));
  rec.add_sink(sink);
  rec.start();
  const Name n = rec.name("before");
  record_counter(rec, n, 1);
  std::vector<LiveMessage> all;
  poll_until(*rx, all, [](auto& m) { return count_events(m, EventKind::Counter) >= 1; });
  REQUIRE(count_events(all, EventKind::Counter) == 1);
  for (auto& m : all)
    if (m.type == LiveMessage::Type::Connected) CHECK(m.events_before == 0);  // the first viewer sees it all
  // The viewer restarts on the same port.
  rx.reset();
  ReceiverOptions ro = quiet_receiver();
  ro.endpoint.port = port;
  rx = std::make_unique<StreamReceiver>(ro);
  rx->start();
  all.clear();
  // Keep recording until the sink has noticed the restart and reconnected.
  for (int i = 0; i < 1000 && count_events(all, EventKind::Counter) == 0; ++i) {
    record_counter(rec, n, 2);
    std::this_thread::sleep_for(10ms);
    rx->poll(all);
  }
  rec.stop();
  sink->close(2000);
  CHECK(count_events(all, EventKind::Counter) >= 1);
  bool named = false;
  for (auto& m : all)
    for (auto& [id, text] : m.strings) named |= id == n.id && text == "before";
  CHECK(named);
  CHECK(sink->stats().connects >= 2);
  // The second viewer learns that the stream began before it (it must not fold memory from here).
  uint64_t before_second = 0;
  for (auto& m : all)
    if (m.type == LiveMessage::Type::Connected) before_second = m.events_before;
  CHECK(before_second >= 1);
}

TEST_CASE("the decoder gives the same result fed byte by byte", "[profiler][stream]") {
  std::vector<char> stream(sizeof(StreamHello));
  const StreamHello h = good_hello();
  std::memcpy(stream.data(), &h, sizeof h);
  ChunkEncoder enc(Codec::Lz4);
  std::vector<Event> ev;
  for (int i = 0; i < 1000; ++i) ev.push_back(Event::from(make_counter(i, 1, i)));
  const StringDef defs[] = {{1, "x"}};
  enc.encode(defs, 1, ev.data(), ev.size(), 0, stream);
  enc.encode(nullptr, 0, ev.data(), 10, 0, stream);
  struct Count : StreamDecoder::Output {
    size_t events = 0, hellos = 0;
    bool on_hello(const StreamHello&, std::string&) override { return ++hellos, true; }
    void on_frame(const std::vector<StringDef>&, const Event*, size_t n) override { events += n; }
  } c;
  StreamDecoder d;
  for (char b : stream) REQUIRE(d.feed(&b, 1, c));
  CHECK(c.hellos == 1);
  CHECK(c.events == 1010);
  CHECK(d.strings()[1] == "x");
  // Corrupt one payload byte of the second frame: a clear error, then nothing more accepted.
  stream[stream.size() - 3] ^= 0x10;
  StreamDecoder d2;
  Count c2;
  CHECK_FALSE(d2.feed(stream.data(), stream.size(), c2));
  CHECK(d2.error().find("frame 1") != std::string::npos);
  CHECK(d2.error().find("checksum mismatch") != std::string::npos);
}

TEST_CASE("a connection decodes to the same messages in any pieces, and its close says how it ended", "[profiler][stream]") {
  // ConnectionDecoder is StreamReceiver's per-socket work with no socket: what the viewer's live
  // session meets, and what the live fuzz target feeds it.
  std::vector<char> stream(sizeof(StreamHello));
  StreamHello h = good_hello();
  h.rank = 2;
  h.stream_id = 42;
  std::memcpy(stream.data(), &h, sizeof h);
  ChunkEncoder enc(Codec::Lz4);
  std::vector<Event> ev;
  for (int i = 0; i < 100; ++i) ev.push_back(Event::from(make_counter(i, 1, i)));
  const StringDef defs[] = {{1, "x"}};
  enc.encode(defs, 1, ev.data(), ev.size(), 2, stream);
  const Event end = stream_end_marker(200);
  enc.encode(nullptr, 0, &end, 1, 2, stream);

  std::vector<StreamHelloAck> replies;
  const auto decode = [&](size_t piece) {
    ConnectionDecoder c(7, 1u << 20, [&](const StreamHelloAck& a) { replies.push_back(a); });
    std::vector<LiveMessage> out;
    for (size_t at = 0; at < stream.size(); at += piece)
      REQUIRE(c.feed(stream.data() + at, std::min(piece, stream.size() - at), out));
    CHECK(c.ended());
    c.close(c.reason_at_eof(), out);
    return out;
  };
  const auto whole = decode(stream.size()), bytes = decode(1);
  REQUIRE(replies.size() == 2);
  CHECK(replies[0].status == HelloStatus::Accepted);
  for (const auto* out : {&whole, &bytes}) {
    REQUIRE(out->size() == 3);  // Connected, one Data (the end marker is no event), Disconnected
    CHECK(out->at(0).type == LiveMessage::Type::Connected);
    CHECK(out->at(0).stream_id == 42);
    CHECK(out->at(1).events.size() == 100);
    CHECK(out->at(1).rank == 2);
    CHECK(out->at(1).connection == 7);
    CHECK(out->at(2).type == LiveMessage::Type::Disconnected);
    CHECK(out->at(2).ended);
    CHECK(out->at(2).text == "the rank ended its stream");
  }

  // A refused hello is answered, and the connection closes with an Error and no Disconnected: that
  // rank never connected.
  h.protocol_version = kStreamProtocolVersion + 1;
  ConnectionDecoder refused(8, 1u << 20, [&](const StreamHelloAck& a) { replies.push_back(a); });
  std::vector<LiveMessage> out;
  CHECK_FALSE(refused.feed(&h, sizeof h, out));
  CHECK(replies.back().status == HelloStatus::VersionMismatch);
  refused.close("unused", out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].type == LiveMessage::Type::Error);
  CHECK(out[0].text.find("use matching memcomm versions") != std::string::npos);
}

TEST_CASE("a rank that closes its stream ends it, and a connection cut without its end is said so", "[profiler][stream]") {
  // A closed socket looked the same for a finished run and a killed rank (See Note [The end of a stream]).
  StreamReceiver rx(quiet_receiver());
  rx.start();
  const auto disconnected = [](auto& m) { return has_type(m, LiveMessage::Type::Disconnected); };
  std::vector<LiveMessage> all;
  const uint64_t sent = record_counters(rx.port(), 100).sent_events;
  poll_until(rx, all, disconnected);
  REQUIRE(disconnected(all));
  CHECK(all.back().ended);
  CHECK(all.back().text == "the rank ended its stream");
  CHECK(count_events(all, EventKind::Counter) == 100);
  CHECK(count_events(all, EventKind::Drops) == 0);  // taken out of the data
  CHECK(rx.stats().events == sent);  // the marker is no recorded event: neither sent nor received

  all.clear();  // a rank killed after its hello and one frame: no marker
  {
    const int fd = raw_connect(rx.port());
    const StreamHello h = good_hello();
    ::send(fd, &h, sizeof h, 0);
    StreamHelloAck ack{};
    ::recv(fd, &ack, sizeof ack, MSG_WAITALL);
    const Event e = Event::from(make_counter(1, 0, 1.0));
    std::vector<char> frame;
    ChunkEncoder(Codec::Lz4).encode(nullptr, 0, &e, 1, 0, frame);
    ::send(fd, frame.data(), frame.size(), 0);
    ::close(fd);
  }
  poll_until(rx, all, disconnected);
  REQUIRE(disconnected(all));
  CHECK_FALSE(all.back().ended);
  CHECK(all.back().text.find("before its stream's end") != std::string::npos);
  CHECK(count_events(all, EventKind::Counter) == 1);
}

TEST_CASE("the end-of-stream marker is a DropEvent of no events that nothing else sends", "[profiler][stream]") {
  const Event m = stream_end_marker(42);
  CHECK(is_stream_end_marker(m));
  CHECK(m.ts == 42);
  DropEvent d = m.as<DropEvent>();
  CHECK(d.count == 0);  // a viewer from before the marker adds no drops
  d.count = 1;
  CHECK_FALSE(is_stream_end_marker(Event::from(d)));
  d.count = 0;
  d.thread = kStreamDropThread;
  CHECK_FALSE(is_stream_end_marker(Event::from(d)));
}
