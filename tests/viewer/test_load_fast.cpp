// The fast trace load (Note [Fast ingest] in viewer/model/ingest_trace.hpp): one decode per
// chunk, each event written once into arrays that grow without copies, decode-ahead and
// prefaulting (Note [Prefaulting on the second core]) on a second thread, and loads of a time
// range only (Note [Time range load]).
#include "memcomm_test.hpp"

#include <memcomm/view/loader.hpp>

#include <memcomm/trace/trace_writer.hpp>

#include <string>
#include <vector>

using namespace memcomm::view;
namespace prof = memcomm::prof;

namespace {

// What the generator wrote, to check the load against.
struct Written {
  std::size_t kernels[2] = {0, 0};  // per rank
  std::size_t allocs[2] = {0, 0};
  std::size_t steps[2] = {0, 0};
  std::size_t colls[2] = {0, 0};
  std::size_t samples[2] = {0, 0};
};

// A merged two-rank trace of `steps` 1 ms steps, written as many chunks per rank, each step with
// 20 kernels on 2 streams, an alloc and a free, a collective and a memory sample. Rank 1's kernel
// mix changes after the first chunk so that the size estimate from one chunk is off.
Written write_trace(const std::string& path, int steps, std::size_t chunk_events) {
  prof::WriterOptions o;
  o.merged = true;
  o.world_size = 2;
  prof::TraceWriter w(path, o);
  const std::string k0 = "gemm", k1 = "softmax";
  Written out;
  for (std::uint32_t rank = 0; rank < 2; ++rank) {
    std::vector<prof::StringDef> defs = {{1, k0}, {2, k1}};
    std::vector<prof::Event> ev;
    std::uint32_t seq = 0;
    auto flush = [&] {
      w.write_chunk(defs, ev, rank);
      defs.clear();
      ev.clear();
    };
    ev.push_back(prof::Event::from(prof::make_comm_info(0, 0, 2, static_cast<std::uint16_t>(rank), 7)));
    for (int s = 0; s < steps; ++s) {
      const std::int64_t t = 1'000'000 + static_cast<std::int64_t>(s) * 1'000'000;
      ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeBegin, t, prof::Phase::Step, 0, s, 0)));
      const int kernels = rank == 1 && s > steps / 2 ? 30 : 20;
      for (int k = 0; k < kernels; ++k) {
        const std::int64_t k_t = t + 1000 + k * 20'000;
        ev.push_back(prof::Event::from(prof::make_compute(prof::EventKind::Kernel, k_t, k_t + 10'000,
                                                          static_cast<std::uint8_t>(k % 2), 1 + k % 2)));
        ++out.kernels[rank];
      }
      ev.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::Alloc, t + 10, 0x1000 + s * 64, 64)));
      ev.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::FreeRequested, t + 900'000, 0x1000 + s * 64, 64)));
      out.allocs[rank] += 2;
      ev.push_back(prof::Event::from(prof::make_mem_sample(t + 20, prof::MemMetric::Allocated, 64)));
      ++out.samples[rank];
      ev.push_back(prof::Event::from(prof::make_collective(prof::EventKind::CollStart, t + 700'000, prof::CollOp(1), prof::DType(0), 4096, 0, seq)));
      ev.push_back(prof::Event::from(prof::make_collective(prof::EventKind::CollEnd, t + 800'000, prof::CollOp(1), prof::DType(0), 4096, 0, seq++)));
      ++out.colls[rank];
      ev.push_back(prof::Event::from(prof::make_range(prof::EventKind::RangeEnd, t + 999'000, prof::Phase::Step, 0, s, 0)));
      ++out.steps[rank];
      if (ev.size() >= chunk_events) flush();
    }
    if (!ev.empty()) flush();
  }
  w.close();
  return out;
}

std::size_t spans_of(const RankData& rd, LaneKind kind) {
  std::size_t n = 0;
  for (const auto& lane : rd.lanes)
    if (lane.kind == kind) n += lane.span_count();
  return n;
}

bool same_spans(const Timeline& a, const Timeline& b) {
  if (a.ranks.size() != b.ranks.size()) return false;
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    const auto& la = a.ranks[r].lanes;
    const auto& lb = b.ranks[r].lanes;
    if (la.size() != lb.size()) return false;
    for (std::size_t l = 0; l < la.size(); ++l) {
      if (la[l].name != lb[l].name || la[l].rows.size() != lb[l].rows.size()) return false;
      for (std::size_t row = 0; row < la[l].rows.size(); ++row) {
        const auto& x = la[l].rows[row];
        const auto& y = lb[l].rows[row];
        if (x.size() != y.size()) return false;
        for (std::size_t i = 0; i < x.size(); ++i)
          if (x[i].start != y[i].start || x[i].end != y[i].end || a.strings.get(x[i].name) != b.strings.get(y[i].name))
            return false;
      }
    }
  }
  return true;
}

}  // namespace

TEST_CASE("a multi-chunk two-rank trace loads every event once with or without decode-ahead and prefaulting", "[unit][viewer]") {
  const std::string path = memcomm::test::temp_path("memcomm_viewer_tests", "fast_two_rank.mct");
  // 3000 steps: over 60 k kernels per rank, so the kernel arrays fill whole chunks, which come
  // from the PrefaultPool when prefault_ahead is on.
  const Written w = write_trace(path, 3000, 500);
  for (int mode = 0; mode < 4; ++mode) {
    LoadOptions o;
    o.decode_ahead = (mode & 1) != 0;
    o.prefault_ahead = (mode & 2) != 0;
    INFO("decode_ahead " << o.decode_ahead << ", prefault_ahead " << o.prefault_ahead);
    Timeline tl;
    std::string error;
    REQUIRE(load_file(path, tl, error, nullptr, o));
    REQUIRE(tl.ranks.size() == 2);
    std::size_t total = 0;
    for (std::uint32_t r = 0; r < 2; ++r) {
      const RankData& rd = tl.ranks[r];
      CHECK(rd.rank == r);
      CHECK(spans_of(rd, LaneKind::Kernel) == w.kernels[r]);
      CHECK(spans_of(rd, LaneKind::Phase) == w.steps[r]);
      CHECK(rd.collectives.size() == w.colls[r]);
      CHECK(rd.alloc_events.size() == w.allocs[r]);
      // The samples are kept beside the curve that the alloc/free events give (Note [Memory curves
      // from block events] in memcomm/trace/allocator_fold.hpp).
      REQUIRE(rd.counter("allocated") != nullptr);
      REQUIRE(rd.counter("sampled:allocated") != nullptr);
      CHECK(rd.counter("sampled:allocated")->size() == w.samples[r]);
      total += w.kernels[r] + w.steps[r] + w.colls[r] + w.allocs[r] + w.samples[r];
      // Kernel names come through the string table of an earlier chunk.
      for (const auto& lane : rd.lanes)
        if (lane.kind == LaneKind::Kernel)
          for (const auto& s : lane.rows.at(0)) REQUIRE((tl.strings.get(s.name) == "gemm" || tl.strings.get(s.name) == "softmax"));
      // Matched across ranks: every collective has a partner.
      for (const auto& c : rd.collectives) CHECK(c.group_size == 2);
    }
    CHECK(tl.event_count == total);
    // The arrays are trimmed after the load: the model stays within the memory budget.
    CHECK(static_cast<double>(tl.memory_bytes()) / static_cast<double>(tl.event_count) < 40.0);
  }
  Timeline a;
  std::string error;
  LoadOptions seq;
  seq.decode_ahead = seq.prefault_ahead = false;
  REQUIRE(load_file(path, a, error, nullptr, seq));
  for (int mode = 1; mode < 4; ++mode) {
    LoadOptions par;
    par.decode_ahead = (mode & 1) != 0;
    par.prefault_ahead = (mode & 2) != 0;
    Timeline b;
    REQUIRE(load_file(path, b, error, nullptr, par));
    CHECK(same_spans(a, b));
  }
}

TEST_CASE("a time range loads only the events that overlap it", "[unit][viewer]") {
  const std::string path = memcomm::test::temp_path("memcomm_viewer_tests", "fast_range.mct");
  write_trace(path, 400, 500);
  // Range seconds count from the first event of the file: the CommInfo at t = 0. Step s spans
  // [1 ms + s ms, 1 ms + s ms + 0.999 ms].
  LoadOptions o;
  o.range_lo_s = 0.100;
  o.range_hi_s = 0.150;
  Timeline all, part;
  std::string error;
  REQUIRE(load_file(path, all, error));
  REQUIRE(load_file(path, part, error, nullptr, o));
  REQUIRE(part.ranks.size() == 2);
  CHECK(part.event_count < all.event_count / 4);
  CHECK(part.sources.back().find("range 0.100..0.150 s") != std::string::npos);
  const std::int64_t lo = 100'000'000, hi = 150'000'000;
  for (const RankData& rd : part.ranks) {
    // Steps 99..149 overlap [100 ms, 150 ms]: step 99 spans [100 ms, 100.999 ms].
    CHECK(spans_of(rd, LaneKind::Phase) == 51);
    for (const auto& lane : rd.lanes)
      for (const auto& row : lane.rows)
        for (const auto& s : row) {
          CHECK(s.end >= lo);
          CHECK(s.start <= hi);
        }
    for (const auto& e : rd.alloc_events) {
      CHECK(e.t >= lo);
      CHECK(e.t <= hi);
    }
    CHECK(rd.collectives.size() == 50);  // collectives at +0.7 ms of steps 99..148
  }
  CHECK(part.begin >= lo);
  CHECK(part.end <= hi + 1'000'000);
}

TEST_CASE("time ranges are parsed with clear errors", "[unit][viewer]") {
  LoadOptions o;
  std::string error;
  CHECK(parse_time_range("1.5:3", o, error));
  CHECK(o.range_lo_s == 1.5);
  CHECK(o.range_hi_s == 3.0);
  CHECK(o.has_range());
  for (const char* bad : {"3:1", "1", ":2", "a:b", "-1:2", "1:2x", "2:2"}) {
    INFO(bad);
    CHECK_FALSE(parse_time_range(bad, o, error));
    CHECK(error.find(bad) != std::string::npos);
  }
}

