// The snapshot advisor (advise_snapshot.hpp) on snapshots built by hand, each with one known
// problem and its numbers worked out here: the policy replay, empty_cache churn (Note [Segment
// churn]), the allocator state at an OOM (Note [Rewinding to an OOM]) and its verdict; then the
// shared snapshot with a real OOM, and memcomm-trace advise on snapshot files.
#include "memcomm/advisor/advise_snapshot.hpp"
#include "json_text.hpp"
#include "memcomm/snapshot/memory_rewind.hpp"
#include "memcomm_test.hpp"
#include "run_tool.hpp"
#include "hand_snapshot.hpp"
#include "snapshot_rules.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

using namespace memcomm;
using prof::EventKind;
using snapshot::Event;

namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kBase = 0x7f0000000000;

Event ev(EventKind k, std::uint64_t addr, std::uint64_t size, std::int64_t t = snapshot::kNoTime,
         std::uint32_t stack = snapshot::kNoStack) {
  Event e;
  e.kind = k;
  e.addr = addr;
  e.size = size;
  e.time_us = t;
  e.stack = stack;
  e.flags = Event::kHasAddr;
  return e;
}

snapshot::Block block(std::uint64_t addr, std::uint64_t size, bool active) {
  snapshot::Block b;
  b.address = addr;
  b.size = size;
  b.requested_size = active ? size : 0;
  b.state = active ? snapshot::BlockState::active_allocated : snapshot::BlockState::inactive;
  return b;
}

// One 8 MiB cudaMalloc segment at kBase: 2 MiB live, 2 free, 2 live, 2 free at the end.
snapshot::Snapshot checkerboard() {
  snapshot::Snapshot s;
  snapshot::Segment seg;
  seg.address = kBase;
  seg.total_size = 8 * kMiB;
  for (std::uint64_t i = 0; i < 4; ++i) seg.blocks.push_back(block(kBase + 2 * i * kMiB, 2 * kMiB, i % 2 == 0));
  s.segments.push_back(seg);
  s.device_traces.resize(1);
  return s;
}

// A stack as PyTorch records it, innermost first: unwinder, allocator, two Python frames and an
// interpreter frame memory_viz hides.
std::uint32_t oom_stack(snapshot::Snapshot& s) {
  auto frame = [&](const char* name, const char* file, int line) {
    return s.intern_frame({s.intern_string(name), s.intern_string(file), line});
  };
  return s.intern_stack({frame("torch::unwind::unwind()", "??", 0),
                         frame("c10::cuda::CUDACachingAllocator::malloc", "CUDACachingAllocator.cpp", 0),
                         frame("forward", "/home/u/proj/model.py", 42),
                         frame("_PyEval_EvalFrameDefault", "??", 0),
                         frame("_call_impl", "/site-packages/torch/nn/modules/module.py", 1750)});
}

advise::AdviseOptions no_replay() {
  advise::AdviseOptions o;
  o.replay = false;
  return o;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("MemoryRewind: the end state, then undone event by event", "[advisor][snapshot]") {
  auto s = checkerboard();
  snapshot::MemoryRewind r(s, 0);
  auto m = r.levels();
  CHECK(m.live == 4 * kMiB);
  CHECK(m.reserved == 8 * kMiB);
  CHECK(m.largest_free == 2 * kMiB);
  // The block at +2 MiB was freed at the end: before that it was live, and only +6..8 was free.
  r.undo(ev(EventKind::FreeCompleted, kBase + 2 * kMiB, 2 * kMiB));
  m = r.levels();
  CHECK(m.live == 6 * kMiB);
  CHECK(m.largest_free == 2 * kMiB);
  // Before the block at +4 MiB was allocated, +4..8 was one free range.
  r.undo(ev(EventKind::Alloc, kBase + 4 * kMiB, 2 * kMiB));
  m = r.levels();
  CHECK(m.live == 4 * kMiB);
  CHECK(m.largest_free == 4 * kMiB);
  CHECK(r.contradictions() == 0);
  r.undo(ev(EventKind::Alloc, kBase + 4 * kMiB, 2 * kMiB));  // no block there any more
  CHECK(r.contradictions() == 1);
  // A segment allocated during the trace did not exist before.
  r.undo(ev(EventKind::SegmentAlloc, kBase, 8 * kMiB));
  CHECK(r.levels().reserved == 0);
}

TEST_CASE("MemoryRewind: a block freed but held for a stream is pending until its request is undone",
          "[advisor][snapshot]") {
  // A real CUDA snapshot with max_entries=7: six blocks pending on a side stream at the end, five of
  // them with their free request in the trace; the sixth was requested before the ring buffer began.
  const snapshot::Snapshot s =
      snapshot::load_snapshot(memcomm::test::source_dir() + "/tests/data/gpu-snapshots/ring7_pending.pickle");
  const auto pending = [](const snapshot::MemoryRewind& r) {
    return std::count_if(r.blocks().begin(), r.blocks().end(), [](const auto& kv) { return kv.second.pending; });
  };
  snapshot::MemoryRewind rewind(s, 0);
  CHECK(pending(rewind) == 6);
  for (auto e = s.device_traces[0].rbegin(); e != s.device_traces[0].rend(); ++e) rewind.undo(*e);
  CHECK(pending(rewind) == 1);
  CHECK(rewind.contradictions() == 0);
}

TEST_CASE("MemoryRewind: expandable ranges unmapped later join their segment", "[advisor][snapshot]") {
  snapshot::Snapshot s;
  snapshot::Segment seg;
  seg.address = kBase;
  seg.total_size = 4 * kMiB;  // mapped at the end
  seg.is_expandable = true;
  seg.blocks = {block(kBase, 2 * kMiB, true), block(kBase + 2 * kMiB, 2 * kMiB, false)};
  s.segments.push_back(seg);
  snapshot::MemoryRewind r(s, 0);
  r.undo(ev(EventKind::SegmentUnmap, kBase + 4 * kMiB, 4 * kMiB));  // mapped before: one free run of 6 MiB
  CHECK(r.levels().reserved == 8 * kMiB);
  CHECK(r.levels().largest_free == 6 * kMiB);
  r.undo(ev(EventKind::SegmentMap, kBase + 2 * kMiB, 6 * kMiB));  // before that map, only the live block's page
  CHECK(r.levels().reserved == 2 * kMiB);
  CHECK(r.levels().largest_free == 0);
  // Two cudaMalloc segments that touch stay two ranges.
  snapshot::Snapshot t = checkerboard();
  t.segments.front().blocks.clear();
  snapshot::MemoryRewind two(t, 0);
  two.undo(ev(EventKind::SegmentFree, kBase + 8 * kMiB, 8 * kMiB));
  CHECK(two.levels().reserved == 16 * kMiB);
  CHECK(two.levels().largest_free == 8 * kMiB);
}

TEST_CASE("an OOM with enough free memory in pieces is fragmentation, with the failed stack", "[advisor][snapshot]") {
  auto s = checkerboard();
  s.device_traces[0] = {ev(EventKind::Oom, 0, 3 * kMiB, 1'000'000, oom_stack(s))};
  const auto advice = advise::advise_snapshot(s, no_replay());
  REQUIRE(advice.size() == 1);
  const auto& a = advice.front();
  CHECK(a.topic == advise::Topic::Oom);
  CHECK(has(a.change, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
  INFO(a.evidence);
  CHECK(has(a.evidence, "asking for 3.0 MiB: in blocks 4.0 MiB, reserved 8.0 MiB (4.0 MiB free in the cache), "
                        "largest free block 2.0 MiB"));
  // memory_viz's format and filter (the unwinder and eval-loop frames go); Python frames only, the
  // C++ one left (the allocator's) counted.
  CHECK(has(a.evidence, "model.py:42:forward <- module.py:1750:_call_impl (1 C++ frames not shown)"));
  CHECK(a.saving == 3.0 * kMiB);
  // Already on expandable segments: the fix left is memcomm's allocator.
  s.settings.present = true;
  s.settings.expandable_segments = true;
  CHECK(has(advise::advise_snapshot(s, no_replay()).front().change, "memcomm's caching allocator"));
}

TEST_CASE("an OOM when the live memory fills the cache is really out of memory", "[advisor][snapshot]") {
  auto s = checkerboard();
  // The block at +2 MiB was freed after the OOM: at the OOM only 2 MiB were free.
  s.device_traces[0] = {ev(EventKind::Oom, 0, 3 * kMiB), ev(EventKind::FreeRequested, kBase + 2 * kMiB, 2 * kMiB),
                        ev(EventKind::FreeCompleted, kBase + 2 * kMiB, 2 * kMiB)};
  const auto advice = advise::advise_snapshot(s, no_replay());
  REQUIRE(advice.size() == 1);
  CHECK(has(advice.front().change, "really full"));
  CHECK(has(advice.front().evidence, "in blocks 6.0 MiB, reserved 8.0 MiB (2.0 MiB free in the cache)"));
  CHECK(has(advice.front().evidence, "no stack recorded"));
  CHECK(advice.front().saving == 0);
}

TEST_CASE("an OOM whose request is more than the process could hold says so, not that memory was full",
          "[advisor][snapshot]") {
  // A real CUDA snapshot (tests/data/gpu-snapshots): a 256 TiB request on an H200 with 139 GiB free.
  const snapshot::Snapshot real =
      snapshot::load_snapshot(memcomm::test::source_dir() + "/tests/data/gpu-snapshots/oom.pickle");
  const auto advice = advise::advise_snapshot(real, no_replay());
  REQUIRE(advice.size() == 1);
  CHECK(has(advice.front().change, "the request alone is more than this process could hold"));
  CHECK(has(advice.front().evidence, "asking for 256.00 TiB"));
  CHECK(has(advice.front().evidence, "GiB free on the device"));
  auto s = checkerboard();  // the full case above, with device_free known and the request within it
  s.device_traces[0] = {ev(EventKind::Oom, 0, 3 * kMiB), ev(EventKind::FreeRequested, kBase + 2 * kMiB, 2 * kMiB),
                        ev(EventKind::FreeCompleted, kBase + 2 * kMiB, 2 * kMiB)};
  s.device_traces[0][0].addr = 1 * kMiB;
  s.device_traces[0][0].flags = Event::kHasDeviceFree;
  const auto full = advise::advise_snapshot(s, no_replay());
  REQUIRE(full.size() == 1);
  CHECK(has(full.front().change, "really full"));
  CHECK(has(full.front().evidence, "1.0 MiB free on the device"));
}

TEST_CASE("empty_cache churn: keeping the cache is said to cost what the replay reserves", "[advisor][snapshot]") {
  // select_n's releases held its peak at 20.97 GiB; removing empty_cache() was advised with no word that
  // PyTorch's allocator keeping its cache reaches 28.73 GiB.
  const std::string path = memcomm::test::shared_snapshots_dir() + "-2/select_n__snapshot.pickle";
  if (!std::filesystem::exists(path)) MEMCOMM_SKIP_TEST("shared snapshot not found: " + path);
  const auto advice = advise::advise_snapshot(path, advise::AdviseOptions{});
  const auto churn = std::find_if(advice.begin(), advice.end(), [](const auto& a) { return a.topic == advise::Topic::Churn; });
  REQUIRE(churn != advice.end());
  CHECK(has(churn->change, "kept, the cache would reserve up to 28.73 GiB where the run's releases held it to 20.97 GiB"));
}

TEST_CASE("empty_cache churn: releases matched to later takes of the same size", "[advisor][snapshot]") {
  const std::vector<Event> events = {
      ev(EventKind::SegmentAlloc, kBase, 20 * kMiB, 0),
      ev(EventKind::SegmentFree, kBase, 20 * kMiB, 10),                  // round 1
      ev(EventKind::SegmentAlloc, kBase + kMiB * 100, 20 * kMiB, 20),   // pair 1
      ev(EventKind::SegmentFree, kBase + kMiB * 100, 20 * kMiB, 30),    // round 2
      ev(EventKind::Alloc, kBase + kMiB * 500, 100, 31),                 // block events keep the round going
      ev(EventKind::SegmentFree, kBase + kMiB * 200, 2 * kMiB, 32),
      ev(EventKind::SegmentMap, kBase + kMiB * 300, 2 * kMiB, 40),      // a map never matches a free
      ev(EventKind::SegmentAlloc, kBase + kMiB * 400, 2 * kMiB, 50),    // pair 2
      ev(EventKind::SegmentAlloc, kBase + kMiB * 600, 20 * kMiB, 60),   // pair 3
      ev(EventKind::SegmentAlloc, kBase + kMiB * 700, 40 * kMiB, 70),   // no release of that size
  };
  const auto c = advise::detail::count_churn(events);
  CHECK(c.pairs == 3);
  CHECK(c.bytes == 42 * kMiB);
  CHECK(c.rounds == 2);
  CHECK(c.first_us == 10);
  CHECK(c.last_us == 60);
  snapshot::Snapshot s;
  s.device_traces = {events};
  const auto advice = advise::advise_snapshot(s, no_replay());
  REQUIRE(advice.size() == 1);
  CHECK(advice.front().topic == advise::Topic::Churn);
  CHECK(advice.front().saving == 6);
  CHECK(advice.front().saving_unit == "calls");
  CHECK(has(advice.front().evidence, "3 segments released and taken again at the same size (42.0 MiB re-allocated) "
                                     "over 2 release rounds"));
  // memcomm's own allocator releases pages by its budget, not at empty_cache(): no call to remove.
  s.settings.memcomm = true;
  CHECK(advise::advise_snapshot(s, no_replay()).empty());
  s.settings.memcomm = false;
  // One round (one empty_cache) is paid once: no advice.
  s.device_traces = {std::vector<Event>(events.begin(), events.begin() + 3)};
  CHECK(advise::detail::count_churn(s.device_traces[0]).pairs == 1);
  CHECK(advise::advise_snapshot(s, no_replay()).empty());
}

namespace {
// Growing requests, each freed before the next: PyTorch's default cache keeps every segment (none
// is large enough for the next request), expandable segments grow one.
snapshot::Snapshot growing(bool expandable_recorded) {
  snapshot::Snapshot s;
  s.settings.present = true;
  s.settings.expandable_segments = expandable_recorded;
  std::vector<Event> t;
  std::int64_t now = 0;
  for (std::uint64_t i = 0; i < 8; ++i) {
    const std::uint64_t addr = kBase + i * 1024 * kMiB, size = (30 + 10 * i) * kMiB;
    t.push_back(ev(EventKind::Alloc, addr, size, now++));
    t.push_back(ev(EventKind::FreeRequested, addr, size, now++));
    t.push_back(ev(EventKind::FreeCompleted, addr, size, now++));
  }
  s.device_traces = {t};
  return s;
}
}  // namespace

TEST_CASE("the policy replay advises the policy that reserves least, with the bytes", "[advisor][snapshot]") {
  const auto advice = advise::advise_snapshot(growing(false));
  REQUIRE(advice.size() == 1);
  const auto& a = advice.front();
  INFO(a.evidence);
  CHECK(a.topic == advise::Topic::Fragmentation);
  // PyTorch's default keeps 30+40+...+100 MiB = 520 MiB; the best policy needs about the largest request.
  CHECK(a.saving >= 400.0 * kMiB);
  CHECK((has(a.change, "expandable_segments:True") || has(a.change, "memcomm's caching allocator")));
  CHECK(has(a.evidence, "replaying the snapshot's 16 requests on 1 device(s) (peak live 100.0 MiB)"));
  CHECK(has(a.evidence, "pytorch-expandable"));
  CHECK(has(a.evidence, "recorded setting expandable_segments:False"));
  // Without a replay there is no policy advice.
  CHECK(advise::advise_snapshot(growing(false), no_replay()).empty());
}

TEST_CASE("a run with a private pool (CUDA graphs, MemPool) is never told to use memcomm's allocator, which serves none",
          "[advisor][snapshot]") {
  auto s = growing(false);
  snapshot::Segment graph_pool;
  graph_pool.address = kBase + 16 * 1024 * kMiB;
  graph_pool.total_size = 2 * kMiB;
  graph_pool.pool_id = {1, 0};
  s.segments.push_back(graph_pool);
  s.has_segments = true;
  std::vector<std::string> notes;
  for (const auto& a : advise::advise_snapshot(s, {}, &notes)) CHECK_FALSE(has(a.change, "memcomm"));
  REQUIRE(notes.size() == 1);
  CHECK(has(notes[0], "private pools (CUDA graphs, torch.cuda.MemPool), which memcomm's allocator does not serve"));
  // Its OOM in pieces, already on expandable segments: allocate early, not memcomm's allocator.
  auto oom = checkerboard();
  oom.segments[0].pool_id = {1, 0};
  oom.settings.present = oom.settings.expandable_segments = true;
  oom.device_traces[0] = {ev(EventKind::Oom, 0, 3 * kMiB, 1'000'000)};
  const auto advice = advise::advise_snapshot(oom, no_replay());
  REQUIRE(advice.size() == 1);
  CHECK(has(advice.front().change, "allocate the large buffers early (memcomm's allocator serves no CUDA graph"));
}

TEST_CASE("the policy replay of memcomm's own snapshot compares with memcomm's allocator, the run's", "[advisor][snapshot]") {
  // A snapshot memcomm's allocator wrote (python -m memcomm --allocator cpu --snapshot) was read as
  // PyTorch's without expandable segments: "set expandable_segments:True", the saving counted from
  // PyTorch's default (520 MiB). Here memcomm's allocator (106 MiB) is what the run used, and
  // expandable segments (100 MiB) save 6 MiB against it.
  auto s = growing(false);
  s.settings.memcomm = true;
  const auto advice = advise::advise_snapshot(s);
  REQUIRE(advice.size() == 1);
  const auto& a = advice.front();
  INFO(a.change << "\n" << a.evidence);
  CHECK(has(a.change, "use PyTorch's allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
  CHECK(has(a.change, "instead of 106.0 MiB"));
  CHECK(a.saving == Approx(6.0 * kMiB));
  CHECK(has(a.evidence, "recorded by memcomm's allocator"));
  CHECK_FALSE(has(a.evidence, "expandable_segments:False"));
  // The host's memory (memcomm's CPU allocator): PyTorch has no caching allocator there to switch to.
  s.settings.host = true;
  std::vector<std::string> notes;
  CHECK(advise::advise_snapshot(s, {}, &notes).empty());
  REQUIRE(notes.size() == 1);
  CHECK(has(notes[0], "a snapshot of the host's memory"));
}

TEST_CASE("a snapshot whose trace allocates nothing gets no policy advice, and a note says why", "[advisor][snapshot]") {
  // A 1 GiB segment holding 64 MiB live: packing the end state alone would "save" 960 MiB of the
  // cache an earlier peak left, in an order the run never had.
  snapshot::Snapshot s;
  snapshot::Segment seg;
  seg.address = kBase;
  seg.total_size = 1024 * kMiB;
  seg.blocks = {block(kBase, 64 * kMiB, true), block(kBase + 64 * kMiB, 960 * kMiB, false)};
  s.segments.push_back(seg);
  s.device_traces = {{ev(EventKind::FreeCompleted, kBase + 64 * kMiB, 960 * kMiB)}};  // a ring buffer of one free
  std::vector<std::string> notes;
  CHECK(advise::advise_snapshot(s, {}, &notes).empty());
  REQUIRE(notes.size() == 1);
  CHECK(has(notes[0], "allocates nothing"));
  CHECK(has(notes[0], "torch.cuda.memory._record_memory_history()"));
  s.settings.memcomm = true;  // memcomm's allocator keeps a history when asked, by its own option
  notes.clear();
  advise::advise_snapshot(s, {}, &notes);
  REQUIRE(notes.size() == 1);
  CHECK(has(notes[0], "python -m memcomm --allocator DEVICE --history N"));
  s.settings.memcomm = false;
  // With one allocation in the trace, the replay has an order again.
  s.device_traces[0].push_back(ev(EventKind::Alloc, kBase + 64 * kMiB, 900 * kMiB));
  notes.clear();
  advise::advise_snapshot(s, {}, &notes);
  CHECK(notes.empty());
}

TEST_CASE("an empty snapshot gets a note that there is nothing to advise on", "[advisor][snapshot]") {
  // _dump_snapshot() of a process that never touched the GPU: no segments, an empty trace.
  snapshot::Snapshot s;
  s.device_traces = {{}};
  std::vector<std::string> notes;
  CHECK(advise::advise_snapshot(s, {}, &notes).empty());
  REQUIRE(notes.size() == 1);
  CHECK(has(notes[0], "no segments and no trace events"));
}

TEST_CASE("the policy replay is quiet when the recorded setting is already the best", "[advisor][snapshot]") {
  // The same request again and again: every policy caches the one segment.
  snapshot::Snapshot s;
  for (int i = 0; i < 10; ++i) {
    s.device_traces.resize(1);
    s.device_traces[0].push_back(ev(EventKind::Alloc, kBase, 64 * kMiB));
    s.device_traces[0].push_back(ev(EventKind::FreeCompleted, kBase, 64 * kMiB));
  }
  CHECK(advise::advise_snapshot(s).empty());
}

TEST_CASE("the shared snapshot's OOM: state, verdict and the failed allocation's stack", "[advisor][snapshot][shared]") {
  const std::string path = test::shared_snapshots_dir() + "/code_location__memory_snapshot.pickle";
  if (!std::filesystem::exists(path)) MEMCOMM_SKIP_TEST("shared snapshot not found: " + path);
  const auto advice = advise::advise_snapshot(path);
  const auto oom = std::find_if(advice.begin(), advice.end(), [](const auto& a) { return a.topic == advise::Topic::Oom; });
  REQUIRE(oom != advice.end());
  INFO(oom->evidence);
  CHECK(has(oom->evidence, "code_location__memory_snapshot.pickle: device 1: out of memory at event 421"));
  CHECK(has(oom->evidence, "asking for 4.94 GiB"));  // the recorded size, 5308694528 B
  CHECK(has(oom->evidence, "the allocation that failed: functional.py:1701:relu <- models.py:181:update_nodes"));
  // 132.9 MiB free in the cache against a 4.94 GiB request: the device was really full.
  CHECK(has(oom->change, "really full"));
  // Only one oom event in the file: one piece of OOM advice.
  CHECK(std::count_if(advice.begin(), advice.end(), [](const auto& a) { return a.topic == advise::Topic::Oom; }) == 1);
}

TEST_CASE("memcomm-trace advise reads snapshot files, and refuses garbage with exit 2", "[advisor][snapshot][tool]") {
  const test::TempDir dir("advise-snapshot");
  const auto snap = dir.file("hand.pickle", test::build_snapshot());
  auto r = test::run_tool(dir, "memcomm-trace", "advise --json " + snap.string());
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(memcomm::test::parse_json(r.out).is_array());
  const auto bad = dir.file("bad.pickle", {0x80, 0x04, 0xff, 0x00});
  r = test::run_tool(dir, "memcomm-trace", "advise " + bad.string());
  CHECK(r.code == 2);
  CHECK(has(r.err, "bad.pickle"));
  const auto junk = dir.file("junk.bin", {'h', 'e', 'l', 'l', 'o'});
  r = test::run_tool(dir, "memcomm-trace", "advise --json " + junk.string());
  CHECK(r.code == 2);
  CHECK(has(r.err, "junk.bin"));
}

TEST_CASE("memcomm-trace advise --json on a shared snapshot gives the replay's advice",
          "[advisor][snapshot][tool][shared]") {
  const std::string path = test::shared_snapshots_dir() + "/ftcourse__memory_snapshot.pickle";
  if (!std::filesystem::exists(path)) MEMCOMM_SKIP_TEST("shared snapshot not found: " + path);
  const test::TempDir dir("advise-shared");
  const auto r = test::run_tool(dir, "memcomm-trace", "advise --json " + path);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = memcomm::test::parse_json(r.out);
  bool replay = false;
  for (const auto& a : j)
    replay |= a["topic"] == "fragmentation" && has(a["evidence"].get<std::string>(), "replaying the snapshot's");
  INFO(r.out);
  CHECK(replay);
}
