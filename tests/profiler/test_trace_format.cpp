// .mct format: round trip of every event kind, crash recovery, and clear errors on bad files.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cstddef>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>

#include "memcomm/trace/mixed_runs.hpp"
#include "memcomm/trace/trace_reader.hpp"
#include "memcomm/trace/trace_set.hpp"
#include "memcomm/trace/trace_writer.hpp"
#include "memcomm_test.hpp"
#include "trace_fixtures.hpp"

using namespace memcomm::prof;
using memcomm::prof::test::temp_path;

namespace {
std::vector<char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void spit(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}
// Where chunk `index` of a trace file's bytes begins (its chunks read in order from the header's end).
size_t chunk_offset(const std::vector<char>& file, size_t index) {
  size_t at = sizeof(FileHeader);
  for (size_t k = 0; k < index; ++k) {
    ChunkHeader h;
    std::memcpy(&h, file.data() + at, sizeof h);
    at += sizeof(ChunkHeader) + h.stored_size;
  }
  return at;
}
std::vector<Event> read_all(const std::string& path, RecoveryInfo* info = nullptr) {
  TraceReader r(path);
  std::vector<Event> out;
  ChunkView c;
  while (r.next(c)) out.insert(out.end(), c.begin(), c.end());
  if (info) *info = r.recovery();
  return out;
}
std::string error_of(const std::string& path) {
  try {
    read_all(path);
  } catch (const TraceError& e) {
    return e.what();
  }
  return "";
}
// Writes `chunks` chunks of `per_chunk` counter events numbered 0.. in `value`.
void write_numbered(const std::string& path, int chunks, int per_chunk, Codec codec = Codec::Lz4) {
  WriterOptions o;
  o.rank = 0;
  o.codec = codec;
  TraceWriter w(path, o);
  int n = 0;
  for (int c = 0; c < chunks; ++c) {
    std::vector<Event> ev;
    for (int i = 0; i < per_chunk; ++i, ++n) ev.push_back(Event::from(make_counter(n, 1, n)));
    std::vector<StringDef> s;
    if (c == 0) s.push_back({1, "seq"});
    w.write_chunk(s, ev);
  }
}
}  // namespace

TEST_CASE("every event kind survives a write/read round trip bit for bit", "[profiler][format]") {
  for (Codec codec : {Codec::Lz4, Codec::Zstd, Codec::None}) {
    const auto events = test::one_of_every_kind();
    const auto strings = test::fixture_strings();
    const std::string path = temp_path("roundtrip");
    {
      WriterOptions o;
      o.rank = 3;
      o.world_size = 8;
      o.codec = codec;
      TraceWriter w(path, o);
      w.write_chunk(strings, events);
    }
    TraceReader r(path);
    CHECK(r.header().rank == 3);
    CHECK(r.header().world_size == 8);
    ChunkView c;
    REQUIRE(r.next(c));
    REQUIRE(c.count == events.size());
    CHECK(c.rank == 3);
    CHECK(std::memcmp(c.events, events.data(), events.size() * sizeof(Event)) == 0);
    CHECK_FALSE(r.next(c));
    CHECK(r.string(1) == "volta_sgemm_128x64_nn");
    CHECK(r.string(3) == "loss");
    CHECK_FALSE(r.recovery().truncated);

    // Typed views read back the values the fixtures put in.
    std::set<EventKind> kinds;
    for (const Event& e : events) kinds.insert(e.kind);
    CHECK(kinds.size() == events.size());  // the fixture really has one of each kind
    const auto alloc = events[0].as<MemBlockEvent>();
    CHECK(alloc.addr() == 0x7f12'3456'7800ull + 1);
    CHECK(alloc.size() == (5ull << 32) + 512);
    CHECK(alloc.category == uint8_t(MemCategory::Gradient));
    for (const Event& e : events) {
      INFO(kind_name(e.kind));
      CHECK(is_known_kind(e.kind));
      if (e.kind == EventKind::CollEnd) {
        const auto ce = e.as<CollectiveEvent>();
        CHECK(ce.bytes() == (3ull << 32) + 77);
        CHECK(ce.seq == 41);
        CHECK(+ce.bucket == 7);  // a copy: the packed field cannot bind to a reference
        CHECK(ce.algo() == CollAlgo::Ring);
        CHECK(ce.proto() == CollProto::LL128);
      } else if (e.kind == EventKind::Memcpy) {
        CHECK(decode_bytes32(e.as<ComputeEvent>().arg) == (1u << 20));
        CHECK(e.as<ComputeEvent>().duration() == 700);
      } else if (e.kind == EventKind::Launch) {
        CHECK(e.as<ComputeEvent>().thread() == 300);
      } else if (e.kind == EventKind::Counter) {
        CHECK(e.as<CounterEvent>().value == 0.125);
      } else if (e.kind == EventKind::CommInfo) {
        CHECK(e.as<CommInfoEvent>().hash == 0xABCDEF0123456789ull);
      }
    }
    std::remove(path.c_str());
  }
}

TEST_CASE("byte counts above 2 GiB keep KiB precision in 32 bits", "[profiler][format]") {
  CHECK(decode_bytes32(encode_bytes32(12345)) == 12345);
  CHECK(decode_bytes32(encode_bytes32(5ull << 30)) == (5ull << 30));
}

TEST_CASE("a range's name gives its phase: phase_name's inverse and the short forms", "[profiler][format]") {
  // The viewer colours and sums phase spans by this (one vocabulary with the event model's Phase).
  for (int p = 0; p < static_cast<int>(Phase::Count); ++p) {
    const Phase phase = static_cast<Phase>(p);
    INFO(phase_name(phase));
    CHECK(phase_from_name(phase_name(phase)) == phase);
  }
  CHECK(phase_from_name("Micro-Step") == Phase::MicroStep);
  CHECK(phase_from_name("FWD") == Phase::Forward);
  CHECK(phase_from_name("bwd") == Phase::Backward);
  CHECK(phase_from_name("optim") == Phase::Optimizer);
  CHECK(phase_from_name("data") == Phase::DataWait);
  CHECK(phase_from_name("Checkpoint") == Phase::Checkpoint);
  CHECK(phase_from_name("attention") == Phase::Custom);
  CHECK(phase_from_name("") == Phase::Custom);
}

TEST_CASE("span durations keep ns below 2^31 ns, then us, then ms, and saturate at kMaxDuration", "[profiler][format]") {
  CHECK(decode_duration32(encode_duration32(-5)) == 0);
  CHECK(decode_duration32(encode_duration32(2'147'483'647)) == 2'147'483'647);  // exact below 2^31 ns
  CHECK(decode_duration32(encode_duration32(4'300'000'123)) == 4'300'000'000);  // past version 1's 4.29 s
  const int64_t ten_minutes = 600'000'000'000;                                   // a watchdog's wait
  CHECK(decode_duration32(encode_duration32(ten_minutes + 999)) == ten_minutes);
  const int64_t two_hours = 7'200'000'000'000;
  CHECK(decode_duration32(encode_duration32(two_hours + 999'999)) == two_hours);
  CHECK(decode_duration32(encode_duration32(std::numeric_limits<int64_t>::max())) == kMaxDuration);
  for (int64_t ns = 1; ns < kMaxDuration; ns = ns * 3 + 7) {  // rounded down, by less than a unit
    const int64_t unit = ns < (int64_t(1) << 31) ? 1 : ns < (int64_t(1000) << 30) ? 1000 : 1'000'000;
    const int64_t back = decode_duration32(encode_duration32(ns));
    CHECK(back <= ns);
    CHECK(ns - back < unit);
  }
}

TEST_CASE("a second writer of a file being written is refused, and the file is kept", "[profiler][format]") {
  // See Note [One writer per trace file].
  const std::string path = temp_path("busy");
  {
    TraceWriter first(path, WriterOptions{});
    write_numbered(path + ".other", 1, 1);  // an unrelated file is not affected
    CHECK_THROWS_AS(TraceWriter(path, WriterOptions{}), TraceFileBusy);
    const std::vector<Event> ev{Event::from(make_counter(1, 0, 42))};
    first.write_chunk(std::vector<StringDef>{}, ev);
  }
  const auto events = read_all(path);
  REQUIRE(events.size() == 1);
  CHECK(events[0].as<CounterEvent>().value == 42);
  { TraceWriter again(path, WriterOptions{}); }  // once closed, a new run overwrites it
  CHECK(read_all(path).empty());
  std::remove(path.c_str());
  std::remove((path + ".other").c_str());
}

TEST_CASE("a version 1 file's long spans are read with their duration", "[profiler][format]") {
  const std::string path = temp_path("v1");
  auto kernel = make_compute(EventKind::Kernel, 1000, 1001, 0, 1);
  kernel.dur = 3'000'000'123u;  // version 1: plain ns up to 2^32 - 1
  {
    TraceWriter w(path, WriterOptions{});
    const std::vector<StringDef> strings{{1, "k"}};
    w.write_chunk(strings, std::vector<Event>{Event::from(kernel), Event::from(make_counter(5, 1, 7))});
  }
  auto bytes = slurp(path);
  FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  h.event_version = 1;
  h.header_checksum = uint32_t(trace_hash(&h, offsetof(FileHeader, header_checksum)));
  std::memcpy(bytes.data(), &h, sizeof h);
  spit(path, bytes);
  const auto events = read_all(path);
  REQUIRE(events.size() == 2);
  CHECK(events[0].as<ComputeEvent>().duration() == 3'000'000'000);  // microseconds kept
  CHECK(events[1].as<CounterEvent>().value == 7);
  h.event_version = 7;
  h.header_checksum = uint32_t(trace_hash(&h, offsetof(FileHeader, header_checksum)));
  std::memcpy(bytes.data(), &h, sizeof h);
  spit(path, bytes);
  CHECK_THAT(error_of(path), Catch::Contains("unsupported event model version 7"));
  std::remove(path.c_str());
}

TEST_CASE("a writer killed with SIGKILL leaves its complete chunks readable", "[profiler][format]") {
  const std::string path = temp_path("killed");
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(pipefd[0]);
    TraceWriter w(path, WriterOptions{});
    std::vector<Event> ev(5000);
    for (uint64_t n = 0;; ++n) {
      for (size_t i = 0; i < ev.size(); ++i) ev[i] = Event::from(make_counter(int64_t(n * ev.size() + i), 0, double(i)));
      w.write_chunk(nullptr, 0, ev.data(), ev.size());
      const char one = 1;
      if (n < 20 && ::write(pipefd[1], &one, 1) != 1) _exit(3);
    }
  }
  ::close(pipefd[1]);
  char buf[20];
  size_t got = 0;
  while (got < sizeof buf) {
    const ssize_t r = ::read(pipefd[0], buf, sizeof buf - got);
    REQUIRE(r > 0);
    got += size_t(r);
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(pipefd[0]);
  REQUIRE(WIFSIGNALED(status));

  RecoveryInfo info;
  const auto events = read_all(path, &info);
  CHECK(info.chunks >= 20);
  CHECK(events.size() == info.chunks * 5000);
  for (size_t i = 0; i < events.size(); ++i) REQUIRE(events[i].ts == int64_t(i));  // nothing garbled

  // Cut the file inside its last complete chunk (dropping any partial one the kill left): the
  // chunks before it come back, and the truncation is reported.
  auto bytes = slurp(path);
  REQUIRE(info.bytes_used <= bytes.size());
  bytes.resize(info.bytes_used - 100);
  spit(path, bytes);
  const auto cut = read_all(path, &info);
  CHECK(info.truncated);
  CHECK(info.truncated_bytes > 0);
  CHECK(info.detail.find("incomplete") != std::string::npos);
  CHECK(cut.size() == events.size() - 5000);
  std::remove(path.c_str());
}

TEST_CASE("corrupt checksums and lengths give clear errors naming the chunk and offset", "[profiler][format]") {
  const std::string path = temp_path("corrupt");
  write_numbered(path, 3, 1000);
  const auto good = slurp(path);
  const size_t chunk1 = chunk_offset(good, 1);

  SECTION("a flipped payload byte") {
    auto bad = good;
    bad[chunk1 + sizeof(ChunkHeader) + 5] ^= 0x40;
    spit(path, bad);
    const std::string err = error_of(path);
    CHECK(err.find("chunk 1") != std::string::npos);
    CHECK(err.find("checksum mismatch") != std::string::npos);
    CHECK(err.find("byte offset " + std::to_string(chunk1)) != std::string::npos);
  }
  SECTION("a corrupted stored checksum") {
    auto bad = good;
    bad[chunk1 + offsetof(ChunkHeader, checksum)] ^= 1;
    spit(path, bad);
    CHECK(error_of(path).find("checksum mismatch") != std::string::npos);
  }
  SECTION("an inconsistent raw length") {
    auto bad = good;
    uint32_t raw = 12345;
    std::memcpy(&bad[chunk1 + offsetof(ChunkHeader, raw_size)], &raw, 4);
    spit(path, bad);
    const std::string err = error_of(path);
    CHECK(err.find("inconsistent lengths") != std::string::npos);
    CHECK(err.find("chunk 1") != std::string::npos);
  }
  SECTION("a huge raw length") {
    auto bad = good;
    uint32_t raw = 0xFFFFFFF0u;
    std::memcpy(&bad[chunk1 + offsetof(ChunkHeader, raw_size)], &raw, 4);
    spit(path, bad);
    CHECK(error_of(path).find("exceeds the limit") != std::string::npos);
  }
  SECTION("a stored length past the end of the file, mid-file") {
    auto bad = good;
    uint32_t stored = 0x7FFFFFF0u;
    std::memcpy(&bad[chunk1 + offsetof(ChunkHeader, stored_size)], &stored, 4);
    spit(path, bad);
    CHECK(error_of(path).find("inconsistent lengths") != std::string::npos);
  }
  SECTION("a shortened stored length") {
    auto bad = good;
    uint32_t stored = 8;
    std::memcpy(&bad[chunk1 + offsetof(ChunkHeader, stored_size)], &stored, 4);
    spit(path, bad);
    CHECK(error_of(path).find("checksum mismatch") != std::string::npos);
  }
  SECTION("garbage where a chunk should start") {
    auto bad = good;
    std::memset(&bad[chunk1], 0x5A, 4);
    spit(path, bad);
    CHECK(error_of(path).find("bad chunk magic") != std::string::npos);
  }
  std::remove(path.c_str());
}

TEST_CASE("zeros at the end of a file, as a host crash leaves, cut it after its complete chunks", "[profiler][format]") {
  // See Note [A tail of zeros]: 20 zero bytes after the last chunk, or a last chunk whose end is zeros,
  // lost the whole file as "bad chunk magic" or "checksum mismatch".
  const std::string path = temp_path("zeros");
  write_numbered(path, 3, 1000);
  const auto good = slurp(path);
  const size_t chunk1 = chunk_offset(good, 1), chunk2 = chunk_offset(good, 2);
  const auto read_cut = [&](std::vector<char> bytes, size_t expected_events) {
    spit(path, bytes);
    RecoveryInfo info;
    const auto events = read_all(path, &info);
    CHECK(events.size() == expected_events);
    CHECK(info.truncated);
    CHECK(info.detail.find("zeros from byte offset") != std::string::npos);
  };
  SECTION("zeros after the last chunk") {
    for (size_t n : {size_t(3), size_t(20), size_t(4096)}) {
      auto bytes = good;
      bytes.resize(bytes.size() + n, 0);
      read_cut(bytes, 3000);
    }
  }
  SECTION("the last chunk's last blocks zeroed") {
    const size_t from = (chunk2 + sizeof(ChunkHeader)) / 512 * 512 + 512;
    REQUIRE(from + 512 <= good.size());
    auto bytes = good;
    std::fill(bytes.begin() + std::ptrdiff_t(from), bytes.end(), 0);
    read_cut(bytes, 2000);
  }
  SECTION("a last chunk damaged elsewhere whose end is a few zero bytes is corruption") {
    auto bytes = good;
    bytes[chunk2 + sizeof(ChunkHeader) + 5] ^= 0x40;
    const size_t from = bytes.size() - 7;
    std::fill(bytes.begin() + std::ptrdiff_t(from), bytes.end(), 0);
    spit(path, bytes);
    CHECK(error_of(path).find("chunk 2") != std::string::npos);
  }
  SECTION("zeros inside a chunk with data after it are corruption") {
    auto bytes = good;
    std::fill(bytes.begin() + std::ptrdiff_t(chunk1) + 40, bytes.begin() + std::ptrdiff_t(chunk1) + 80, 0);
    spit(path, bytes);
    CHECK(error_of(path).find("chunk 1") != std::string::npos);
  }
  std::remove(path.c_str());
}

TEST_CASE("version mismatches and foreign files are refused clearly", "[profiler][format]") {
  const std::string path = temp_path("version");
  write_numbered(path, 1, 10);
  auto bytes = slurp(path);
  SECTION("format version") {
    uint16_t v = 99;
    std::memcpy(&bytes[offsetof(FileHeader, format_version)], &v, 2);
    spit(path, bytes);
    const std::string err = error_of(path);
    CHECK(err.find("unsupported trace format version 99") != std::string::npos);
    CHECK(err.find(path) != std::string::npos);
  }
  SECTION("event model version") {
    uint16_t v = 7;
    std::memcpy(&bytes[offsetof(FileHeader, event_version)], &v, 2);
    spit(path, bytes);
    CHECK(error_of(path).find("unsupported event model version 7") != std::string::npos);
  }
  SECTION("not a trace") {
    spit(path, std::vector<char>{'h', 'e', 'l', 'l', 'o'});
    CHECK(error_of(path).find("not a memcomm trace") != std::string::npos);
  }
  SECTION("a pickle: the message names the tools that read snapshots") {
    spit(path, std::vector<char>{'\x80', '\x04', '}', '.'});
    CHECK(error_of(path).find("PyTorch memory snapshot") != std::string::npos);
    CHECK(error_of(path).find("memcomm-trace memory") != std::string::npos);
  }
  SECTION("a missing file") {
    std::remove(path.c_str());
    CHECK(error_of(path).find("cannot open trace file") != std::string::npos);
  }
  std::remove(path.c_str());
}

TEST_CASE("TraceSet merges ranks onto one timeline using their clock offsets", "[profiler][format]") {
  const std::string p0 = temp_path("set0"), p1 = temp_path("set1");
  for (int rank : {0, 1}) {
    WriterOptions o;
    o.rank = uint32_t(rank);
    o.world_size = 2;
    TraceWriter w(rank == 0 ? p0 : p1, o);
    std::vector<Event> ev = {Event::from(make_meta(0, MetaKey::ClockOffset, rank == 0 ? 0 : 1000)),
                             Event::from(make_counter(5000, 1, 1.0)), Event::from(make_counter(4000, 1, 2.0))};
    w.write_chunk({{1, "x"}}, ev);
  }
  const TraceSet set = TraceSet::load({p1, p0});
  REQUIRE(set.ranks.size() == 2);
  CHECK(set.ranks[0].rank == 0);
  CHECK(set.ranks[1].rank == 1);
  CHECK(set.ranks[1].clock_offset_ns == 1000);
  // Sorted, and shifted for rank 1 only.
  CHECK(set.ranks[0].events[1].ts == 4000);
  CHECK(set.ranks[1].events[1].ts == 5000);
  CHECK(set.ranks[1].events[2].ts == 6000);
  CHECK(set.ranks[1].name(1) == "x");
  CHECK_THROWS_WITH(TraceSet::load({p0, p0}), Catch::Contains("is given twice (rank 0)"));
  std::remove(p0.c_str());
  std::remove(p1.c_str());
}

TEST_CASE("TraceSet says when its ranks cannot be one run's", "[profiler][format]") {
  // See Note [One run or several]: each rank records [start + 1000, start + 5000] of wall-clock time;
  // its timestamps are its host's monotonic clock, from `boot` on.
  const auto write = [](const std::string& path, uint32_t rank, uint32_t world, int64_t start, int64_t boot = 0) {
    WriterOptions o;
    o.rank = rank;
    o.world_size = world;
    TraceWriter w(path, o);
    w.write_chunk({}, {Event::from(make_meta(boot, MetaKey::StartTime, start)), Event::from(make_counter(boot + 1000, 1, 1.0)),
                       Event::from(make_counter(boot + 5000, 1, 2.0))});
  };
  const std::string a = temp_path("run_a0"), b = temp_path("run_a1"), c = temp_path("run_b1"), d = temp_path("run_c1");
  write(a, 0, 2, 1'000'000);
  write(b, 1, 2, 1'003'000, int64_t(7) << 40);   // one run on another host: the recordings overlap
  write(c, 1, 2, 9'000'000);   // recorded long after rank 0 had stopped
  write(d, 3, 2, 1'000'000);   // outside its world, and a world of 2 beside a's 2
  CHECK(TraceSet::load({a, b}).mixed_runs().empty());
  const auto later = TraceSet::load({a, c}).mixed_runs();
  REQUIRE(later.size() == 1);
  CHECK_THAT(later[0], Catch::Contains("never recorded at the same time"));
  // On today's wall clock (ns since 1970, past the timestamps' clamp): it said nothing.
  const int64_t now = 1'780'000'000'000'000'000;
  write(b, 1, 2, now + 3000);
  write(c, 1, 2, now + 600'000'000'000);  // ten minutes later
  write(a, 0, 2, now);
  CHECK(TraceSet::load({a, b}).mixed_runs().empty());
  const auto ten_minutes = TraceSet::load({a, c}).mixed_runs();
  REQUIRE(ten_minutes.size() == 1);
  CHECK_THAT(ten_minutes[0], Catch::Contains("never recorded at the same time"));
  write(a, 0, 2, 1'000'000);
  const auto outside = TraceSet::load({a, d}).mixed_runs();
  REQUIRE(outside.size() == 1);
  CHECK_THAT(outside[0], Catch::Contains("rank 3") && Catch::Contains("outside its own world"));
  write(d, 1, 4, 1'000'000);
  const auto sizes = TraceSet::load({a, d}).mixed_runs();
  REQUIRE(sizes.size() == 1);
  CHECK_THAT(sizes[0], Catch::Contains("world size 2") && Catch::Contains("says 4"));
  for (const auto& p : {a, b, c, d}) std::remove(p.c_str());
  // The viewer takes two files that name the same rank (two single-rank torch.profiler runs) and shows
  // one under another number: said, not silent. A stand-in (no world named) and one file twice are not.
  const auto same = mixed_run_warnings({{0, "x.json", 1, {}, {}}, {0, "y.json", 1, {}, {}}});
  REQUIRE(same.size() == 1);
  CHECK_THAT(same[0], Catch::Contains("rank 0 (x.json) and rank 0 (y.json) are both rank 0:"));
  CHECK(mixed_run_warnings({{0, "x.json", 0, {}, {}}, {0, "y.json", 0, {}, {}}}).empty());
  CHECK(mixed_run_warnings({{0, "x.json", 1, {}, {}}, {0, "x.json", 1, {}, {}}}).empty());
}

TEST_CASE("TraceHasher over pieces equals trace_hash over the whole", "[unit]") {
  std::string data(100000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 7919 % 251);
  for (const uint64_t seed : {uint64_t(0), uint64_t(42)}) {
    memcomm::prof::TraceHasher h(seed);
    for (size_t at = 0, piece = 1; at < data.size(); at += piece, piece = piece * 3 + 1)
      h.update(data.data() + at, std::min(piece, data.size() - at));
    CHECK(h.digest() == memcomm::prof::trace_hash(data.data(), data.size(), seed));
  }
  CHECK(memcomm::prof::TraceHasher().digest() == memcomm::prof::trace_hash(nullptr, 0));
}
