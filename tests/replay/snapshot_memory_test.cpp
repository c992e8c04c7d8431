// Who holds memory: allocation lifetimes (trace/ allocations.hpp), memory_viz's frames
// (snapshot/frames.hpp) and live bytes by site (snapshot/memory.hpp), on hand-built events and on
// the hand-built snapshot. tests/python/test_memory_viz_parity.py checks the same functions against
// torch's memory_viz on the shared snapshots.
#include "memcomm/snapshot/memory.hpp"
#include "memcomm/snapshot/memory_rewind.hpp"
#include "memcomm_test.hpp"
#include "hand_snapshot.hpp"

#include <functional>
#include <limits>

namespace snap = memcomm::snapshot;
namespace prof = memcomm::prof;

namespace {
prof::BlockInfo block(std::uint64_t addr, std::uint64_t size, std::uint32_t stack = prof::kNoStackId) {
  prof::BlockInfo b;
  b.addr = addr;
  b.size = size;
  b.stack = stack;
  return b;
}

snap::Event event(prof::EventKind k, std::uint64_t addr, std::uint64_t size, std::int64_t us) {
  snap::Event e;
  e.kind = k;
  e.addr = addr;
  e.size = size;
  e.time_us = us;
  e.flags = snap::Event::kHasAddr;
  return e;
}
}  // namespace

TEST_CASE("allocations: allocs pair with frees, and blocks from before the trace are live before its begin", "[allocations]") {
  prof::AllocationBuilder b;
  b.alloc(10, block(0x100, 100, 1));
  b.free_requested(15, block(0x900, 7, 4));  // allocated before the trace
  b.alloc(20, block(0x200, 50, 2));
  b.free_requested(30, block(0x100, 100, 1));
  b.free_completed(31, block(0x100, 100, 1));  // after its request: changes nothing
  b.alloc(40, block(0x100, 60, 3));           // the address again
  b.live_at_end(block(0x100, 60, 3));         // open: nothing new
  b.live_at_end(block(0x500, 1000, 5));       // held all along
  const prof::Allocations a = b.finish(10, 40);
  REQUIRE(a.list.size() == 5);
  CHECK(a.unmatched == 0);
  CHECK(prof::live_bytes(a, 8) == 0);
  CHECK(prof::live_bytes(a, 9) == 7 + 1000);  // 1 ns before the first event
  CHECK(prof::live_bytes(a, 10) == 100 + 7 + 1000);
  CHECK(prof::live_bytes(a, 15) == 100 + 1000);       // freed at 15: not live at 15
  CHECK(prof::live_bytes(a, 29) == 150 + 1000);
  CHECK(prof::live_bytes(a, 40) == 110 + 1000);
  const prof::LivePeak peak = prof::peak_live(a);
  CHECK(peak.t == 20);
  CHECK(peak.bytes == 1150);
  const auto sites = prof::live_by_stack(a, peak.t);
  REQUIRE(sites.size() == 3);
  CHECK(sites[0].stack == 5);
  CHECK(sites[0].bytes + sites[1].bytes + sites[2].bytes == peak.bytes);
}

TEST_CASE("allocations: a block from before the trace is charged to its free's stack apart, unless frees carry alloc stacks",
          "[allocations]") {
  for (const std::uint32_t paired_free_stack : {7u, 1u}) {  // context="all" (where it was freed), context="alloc"
    INFO("the paired free's stack: " << paired_free_stack);
    prof::AllocationBuilder b;
    b.alloc(10, block(0x100, 100, 1));
    b.free_requested(20, block(0x900, 30, 1));  // allocated before the trace, freed where 0x100 was allocated
    b.free_requested(30, block(0x100, 100, paired_free_stack));
    const prof::Allocations a = b.finish(10, 30);
    const auto sites = prof::live_by_stack(a, 15);
    const bool frees_record_free_stacks = paired_free_stack != 1;
    REQUIRE(sites.size() == (frees_record_free_stacks ? 2u : 1u));  // one stack id, folded apart or not
    CHECK(sites[0].stack == 1);
    CHECK(sites[0].bytes == (frees_record_free_stacks ? 100u : 130u));
    CHECK(sites[0].stack_of_free == false);
    if (frees_record_free_stacks) CHECK(sites[1].stack_of_free);
  }
}

TEST_CASE("allocations: one free event closes a block, and a lost free closes it at the next alloc", "[allocations]") {
  prof::AllocationBuilder b;
  b.alloc(0, block(0x10, 8));
  b.free_completed(5, block(0x10, 8));  // a producer that records only one free
  b.alloc(6, block(0x20, 4));
  b.alloc(9, block(0x20, 4));           // its free was lost
  b.free_completed(12, block(0x30, 1)); // no request in the trace: allocated before it, live until now
  const prof::Allocations a = b.finish(0, 12);
  CHECK(a.list.size() == 4);
  CHECK(a.unmatched == 1);
  CHECK(prof::live_bytes(a, 5) == 1);
  CHECK(prof::live_bytes(a, 8) == 5);
  CHECK(prof::live_bytes(a, 12) == 4);
}

TEST_CASE("allocations: a block the trace's first event frees counts in the peak", "[allocations]") {
  // A ring buffer that starts with the free of a block allocated before it: the state before that
  // first event holds the block, and is the peak.
  prof::AllocationBuilder b;
  b.free_requested(100, block(0x10, 1000));
  b.alloc(101, block(0x20, 10));
  b.free_completed(102, block(0x10, 1000));  // after its request: nothing more
  const prof::Allocations a = b.finish(100, 102);
  const prof::LivePeak peak = prof::peak_live(a);
  CHECK(peak.bytes == 1000);
  CHECK(peak.t == 99);
  CHECK(prof::live_bytes(a, peak.t) == 1000);
  CHECK(prof::live_bytes(a, 101) == 10);
}

TEST_CASE("allocations: where frees record their requests, a completion with none ends a block freed before the trace",
          "[allocations]") {
  // Told by the producer (PyTorch records every request), or seen in the events: the block was
  // pending free at the trace's start, so it is no allocation of the trace (Note [Allocations
  // before the trace]); the peak is not before the first event.
  for (const bool told : {true, false}) {
    INFO("told: " << told);
    prof::AllocationBuilder b(told);
    b.free_completed(100, block(0x10, 1000));  // the ring buffer cut between its request and this
    b.alloc(101, block(0x20, 10));
    if (!told) b.free_requested(102, block(0x20, 10));
    const prof::Allocations a = b.finish(100, 102);
    REQUIRE(a.list.size() == 1);
    CHECK(a.list[0].addr == 0x20);
    CHECK(prof::live_bytes(a, 99) == 0);
    CHECK(prof::peak_live(a).bytes == 10);
    CHECK(prof::peak_live(a).t == 101);
  }
}

TEST_CASE("allocations: a peak inside one time step counts every change at that time", "[allocations]") {
  prof::AllocationBuilder b;
  b.alloc(0, block(0x10, 100));
  b.alloc(5, block(0x20, 100));
  b.free_requested(5, block(0x10, 100));  // same time: the level after both is 100
  const prof::Allocations a = b.finish(0, 5);
  CHECK(prof::peak_live(a).bytes == 100);
  CHECK(prof::peak_live(a).t == 0);
}

TEST_CASE("snapshot clock: events within one microsecond keep their order in nanoseconds", "[snapshot][memory]") {
  snap::EventClock clock;
  snap::Event e;
  e.time_us = 7;
  CHECK(clock.next(e) == 7000);
  CHECK(clock.next(e) == 7001);
  CHECK(clock.next(e) == 7002);
  e.time_us = 8;
  CHECK(clock.next(e) == 8000);
  e.time_us = INT64_MAX / 10;  // absurd: saturates
  CHECK(clock.next(e) == INT64_MAX);
  CHECK(clock.next(e) == INT64_MAX);
  snap::EventClock untimed;
  snap::Event u;
  CHECK(untimed.next(u) == 0);
  CHECK(untimed.next(u) == 1000);
}

TEST_CASE("snapshot clock: a burst of over 1000 events in one microsecond keeps every event's place", "[snapshot][memory]") {
  // See Note [Event order within a microsecond]: capped at +999 ns, the 1001st event and the rest
  // shared one time, were applied together, and a 1 GiB peak among them vanished.
  snap::EventClock clock;
  snap::Event e;
  e.time_us = 1;
  std::int64_t last = -1;
  for (int k = 0; k < 1500; ++k) {
    const std::int64_t t = clock.next(e);
    CHECK(t == 1000 + k);
    last = t;
  }
  e.time_us = 2;  // the burst ran past 2000 ns: the next microsecond's event comes after it
  CHECK(clock.next(e) == last + 1);
  e.time_us = 3;
  CHECK(clock.next(e) == 3000);
  CHECK(clock.steps_back().count == 0);
}

TEST_CASE("snapshot clock: a time earlier than the one before it is read as that one, and counted", "[snapshot][memory]") {
  snap::EventClock clock;
  snap::Event e;
  e.time_us = 100;
  CHECK(clock.next(e) == 100'000);
  e.time_us = 99;  // a clock stepped back: the event keeps its place in the order
  CHECK(clock.next(e) == 100'001);
  e.time_us = 40;
  CHECK(clock.next(e) == 100'002);
  e.time_us = 101;
  CHECK(clock.next(e) == 101'000);
  CHECK(clock.steps_back().count == 2);
  CHECK(clock.steps_back().largest_us == 60);
  CHECK(snap::ClockStepsBack{}.warning().empty());
  CHECK_THAT((snap::ClockStepsBack{2, 60}.warning()), Catch::Contains("goes back 2 times (by up to 60 us)"));
}

TEST_CASE("snapshot memory: a free stamped before its allocation still ends after it", "[snapshot][memory]") {
  snap::Snapshot s;
  const auto ev = event;
  s.device_traces.push_back({ev(prof::EventKind::Alloc, 0x1000, 1 << 30, 100), ev(prof::EventKind::FreeRequested, 0x1000, 1 << 30, 99),
                             ev(prof::EventKind::FreeCompleted, 0x1000, 1 << 30, 99), ev(prof::EventKind::Alloc, 0x9000, 10, 200)});
  const snap::SnapshotAllocations sa = snap::snapshot_allocations(s);
  CHECK(sa.steps_back.count == 2);
  CHECK(sa.steps_back.largest_us == 1);
  CHECK(prof::peak_live(sa.allocations).bytes == (1u << 30));  // read by its time_us, the block lived -1 us
  CHECK(prof::live_bytes(sa.allocations, 200'000) == 10);
}

TEST_CASE("snapshot memory: an address allocated again while live is said, with times that go back", "[snapshot][memory]") {
  // A damaged trace (or one that lost a free) was read without a word: the earlier block ends there.
  snap::Snapshot s;
  s.device_traces.push_back({event(prof::EventKind::Alloc, 0x1000, 4096, 10), event(prof::EventKind::Alloc, 0x1000, 4096, 20),
                             event(prof::EventKind::Alloc, 0x2000, 512, 15)});
  const std::vector<std::string> w = snap::snapshot_allocations(s).warnings();
  REQUIRE(w.size() == 2);
  CHECK_THAT(w[0], Catch::Contains("goes back 1 time"));
  CHECK_THAT(w[1], Catch::Contains("1 alloc event at an address already live"));
  snap::Snapshot clean;
  clean.device_traces.push_back({event(prof::EventKind::Alloc, 0x1000, 4096, 10)});
  CHECK(snap::snapshot_allocations(clean).warnings().empty());
}

TEST_CASE("snapshot memory: a history recorded without free requests frees each block at its completion",
          "[snapshot][memory]") {
  // See Note [A history without free requests]: skip_actions=["free_requested"]. The block at 0x100 was
  // allocated before the trace and lived until its completion; with requests recorded, a completion
  // with no request is a block the user freed before the trace.
  constexpr std::uint64_t kMiB = 1 << 20;
  snap::Snapshot s;
  s.device_traces.push_back({event(prof::EventKind::Alloc, 0x200, 4 * kMiB, 10),
                             event(prof::EventKind::FreeCompleted, 0x100, 8 * kMiB, 20),
                             event(prof::EventKind::FreeCompleted, 0x200, 4 * kMiB, 30)});
  CHECK_FALSE(s.free_requests_recorded());
  CHECK(prof::peak_live(snap::snapshot_allocations(s).allocations).bytes == 12 * kMiB);
  snap::MemoryRewind rewind(s, 0);
  rewind.undo(s.device_traces[0][2]);
  rewind.undo(s.device_traces[0][1]);
  REQUIRE(rewind.blocks().count(0x100));
  CHECK_FALSE(rewind.blocks().at(0x100).pending);  // the user held it

  s.device_traces[0].insert(s.device_traces[0].begin() + 2, event(prof::EventKind::FreeRequested, 0x200, 4 * kMiB, 29));
  CHECK(s.free_requests_recorded());
  CHECK(prof::peak_live(snap::snapshot_allocations(s).allocations).bytes == 4 * kMiB);
  snap::Snapshot lone;  // nothing tells: PyTorch's default
  lone.device_traces.push_back({event(prof::EventKind::FreeCompleted, 0x100, 8 * kMiB, 20)});
  CHECK(lone.free_requests_recorded());
}

TEST_CASE("allocations: an end state without events is one moment, its peak and its end alike", "[allocations]") {
  prof::AllocationBuilder b(true);
  b.live_at_end(block(0x100, 100, 1));
  b.live_at_end(block(0x900, 50, 2));
  const prof::Allocations a = b.finish(0, 0);
  CHECK(prof::peak_live(a).t == 0);  // was 1 ns before the end, a time the viewer and the CLI named apart
  CHECK(prof::peak_live(a).bytes == 150);
  CHECK(prof::live_bytes(a, 0) == 150);
  prof::AllocationBuilder c(true);  // with an event, blocks from before it are live before it
  c.live_at_end(block(0x100, 100, 1));
  c.alloc(10, block(0x200, 10, 3));
  const prof::Allocations d = c.finish(10, 10);
  CHECK(prof::live_bytes(d, 9) == 100);
}

TEST_CASE("frames: memory_viz's filter and format", "[snapshot][frames]") {
  CHECK_FALSE(snap::is_user_frame("torch::unwind::unwind()", "??"));
  CHECK_FALSE(snap::is_user_frame("_PyEval_EvalFrameDefault", "??"));
  CHECK_FALSE(snap::is_user_frame("call", "/usr/src/Python/ceval.c"));
  CHECK_FALSE(snap::is_user_frame("f", "aten/src/ATen/core/boxing/impl.h"));
  CHECK(snap::is_user_frame("forward", "/home/me/model.py"));

  snap::Snapshot s;
  const std::uint32_t f = s.intern_frame({s.intern_string("forward"), s.intern_string("/home/me/model.py"), 42});
  const std::uint32_t u = s.intern_frame({s.intern_string("torch::unwind::unwind()"), s.intern_string("??"), 0});
  const std::uint32_t g = s.intern_frame({s.intern_string("step"), s.intern_string("/other/dir/model.py"), 42});
  CHECK(snap::frame_text(s, f) == "model.py:42:forward");
  const std::uint32_t a = s.intern_stack({u, f});  // innermost first, as PyTorch stores them
  const std::uint32_t b = s.intern_stack({f});
  const std::uint32_t c = s.intern_stack({u});
  const std::uint32_t d = s.intern_stack({g});
  const snap::StackText text(s);
  CHECK(text.lines(a) == std::vector<std::string>{"model.py:42:forward"});
  CHECK(text.lines(a, true) == std::vector<std::string>{"model.py:42:forward", "??:0:torch::unwind::unwind()"});
  CHECK(text.lines(snap::kNoStack) == std::vector<std::string>{"<non-python>"});
  CHECK(text.site(a) == text.site(b));  // Note [Sites]: equal filtered text, one site
  CHECK(text.site(a) != text.site(d));
  CHECK(text.site_lines(text.site(c)).empty());  // every frame filtered away
  CHECK(text.site(snap::kNoStack) != text.site(c));
  CHECK(text.site_matches(text.site(a), "forward"));
  CHECK(text.site_matches(text.site(a), "model.py"));
  CHECK_FALSE(text.site_matches(text.site(a), "unwind"));
  // See Note [A free's stack]: its own site, under a heading, matched by the same words.
  const std::uint32_t freed = text.site(a, true);
  CHECK(freed != text.site(a));
  CHECK(text.site_lines(freed) == std::vector<std::string>{std::string(snap::kFreeStackHeading), "model.py:42:forward"});
  CHECK(text.site_lines(freed, true).size() == 3);
  CHECK(text.site_matches(freed, "forward"));
}

TEST_CASE("frames: a stack is shown by its innermost Python frame, the native frames inside it counted", "[snapshot][frames]") {
  // See Note [The line a stack is shown by]: a stack recorded with C++ frames (stacks="all").
  const std::vector<std::string> all = {"train.py:9:<module>", "typeobject.c:7494:slot_tp_call", "model.py:20:forward",
                                        "linear.py:125:forward", "python_nn_functions.cpp:0:THPVariable_linear",
                                        "??:0:at::detail::empty_cuda", "CUDACachingAllocator.cpp:0:malloc"};
  CHECK(snap::shown_line(all) == 3);
  snap::StackWindow w = snap::shown_window(all, 2);
  CHECK((w.first == 2 && w.count == 2 && w.outer == 2 && w.inner == 3));
  w = snap::shown_window(all, 16);
  CHECK((w.first == 0 && w.count == 4 && w.outer == 0 && w.inner == 3));
  // No Python frame (a C++ program): the innermost lines, as before.
  const std::vector<std::string> native = {"main.cpp:10:main", "??:0:at::empty", ":0:malloc"};
  CHECK(snap::shown_line(native) == 2);
  w = snap::shown_window(native, 2);
  CHECK((w.first == 1 && w.count == 2 && w.outer == 1 && w.inner == 0));
  // Pseudo-files are Python's (a notebook cell, exec'd code); the free's heading is no frame.
  CHECK(snap::shown_line({"<ipython-input-3-1b2c>:4:<module>", "??:0:malloc"}) == 0);
  const std::vector<std::string> freed = {std::string(snap::kFreeStackHeading), "??:0:dealloc"};
  w = snap::shown_window(freed, 8);
  CHECK((w.heading && w.first == 1 && w.count == 1 && w.outer == 0 && w.inner == 0));
  w = snap::shown_window({std::string(snap::kFreeStackHeading)}, 8);
  CHECK((w.heading && w.first == 1 && w.count == 0));
  CHECK(snap::shown_window({}, 8).count == 0);
  CHECK(snap::shown_line({}) == 0);
}

TEST_CASE("frames: an event's site is its stack's shown line, past interpreter frames that have line numbers",
          "[snapshot][frames]") {
  // A Python built with line info (conda's) records its C frames with lines: the site of every event
  // read methodobject.c:543:cfunction_call, the first frame with a line, not the call that allocated.
  snap::Snapshot s;
  const auto frame = [&](const char* name, const char* file, int line) {
    return s.intern_frame({s.intern_string(name), s.intern_string(file), line});
  };
  const std::uint32_t malloc = frame("c10::cuda::CUDACachingAllocator::malloc", "CUDACachingAllocator.cpp", 0);
  const std::uint32_t cfunction = frame("cfunction_call", "/usr/local/src/conda/python-3.11/Objects/methodobject.c", 543);
  const std::uint32_t pad = frame("pad", "/opt/conda/lib/python3.11/site-packages/torch/nn/functional.py", 5096);
  const std::uint32_t outer = frame("<module>", "/home/me/train.py", 7);
  CHECK(snap::shown_frame(s, s.intern_stack({malloc, cfunction, pad, outer})) == "functional.py:5096:pad");
  CHECK(snap::shown_frame(s, s.intern_stack({malloc})) == "CUDACachingAllocator.cpp:0:c10::cuda::CUDACachingAllocator::malloc");
  CHECK(snap::shown_frame(s, snap::kNoStack).empty());
}

TEST_CASE("snapshot memory: the hand-built snapshot's lifetimes, sites and --at", "[snapshot][memory]") {
  const auto bytes = memcomm::test::build_snapshot();
  const snap::Snapshot s = snap::parse_snapshot(bytes.data(), bytes.size(), "hand.pickle");
  const snap::SnapshotAllocations sa = snap::snapshot_allocations(s);
  const prof::Allocations& a = sa.allocations;
  const snap::StackText text(s);
  // Device 0: 5000 B at 6 MiB from 11 us to 13 us; the end state's active block (1000 B
  // requested) was allocated before the trace. Its first event, a completion with no request at
  // 10 us, ends a 3000 B block freed before the trace: pending all along, never live (Note
  // [Allocations before the trace]). Device 2 (no time_us, so 0, 1, 2 us...): 30 MiB closed by its
  // one free event.
  CHECK(prof::live_bytes(a, 11000) == 5000 + 1000);
  CHECK(prof::live_bytes(a, 13000) == 1000);
  const snap::MemoryAt end = snap::memory_at(a, text, a.end);
  CHECK(end.live_bytes == 1000);
  REQUIRE(end.sites.size() == 1);
  CHECK(text.site_lines(end.sites[0].site) == std::vector<std::string>{"<non-python>"});
  std::int64_t t = 0;
  std::string error;
  REQUIRE(snap::resolve_at(a, "peak", t, error));
  const snap::MemoryAt peak = snap::memory_at(a, text, t);
  CHECK(peak.live_bytes == 30 * memcomm::test::MiB + 1000);
  REQUIRE(snap::resolve_at(a, "0", t, error));
  CHECK(t == a.begin);
  const std::string past = std::to_string(static_cast<double>(a.end - a.begin) / 1e9 + 1.0);
  for (const char* bad : {"1e99", "1e30", past.c_str()}) {  // a number, past the end: said so (it read "expected a number")
    REQUIRE_FALSE(snap::resolve_at(a, bad, t, error));
    CHECK(error.find("past the trace's end") != std::string::npos);
  }
  for (const char* bad : {"-1", "soon", "nan", "1e99", "", "2s", past.c_str()}) {
    CAPTURE(bad);
    CHECK_FALSE(snap::resolve_at(a, bad, t, error));
    CHECK(error.find("--at") != std::string::npos);
  }
}

TEST_CASE("snapshot memory: compare lists what grew by site, largest first", "[snapshot][memory]") {
  snap::Snapshot s;
  const std::uint32_t f = s.intern_frame({s.intern_string("f"), s.intern_string("a.py"), 1});
  const std::uint32_t g = s.intern_frame({s.intern_string("g"), s.intern_string("a.py"), 2});
  const std::uint32_t sf = s.intern_stack({f}), sg = s.intern_stack({g});
  const snap::StackText text(s);
  snap::MemoryAt before, after;
  before.sites = {{text.site(sf), 100, 1}, {text.site(sg), 50, 1}};
  after.sites = {{text.site(sf), 40, 1}, {text.site(sg), 500, 2}, {text.site(snap::kNoStack), 7, 1}};
  const auto changes = snap::compare_sites(snap::named_sites(before, text), snap::named_sites(after, text));
  REQUIRE(changes.size() == 3);
  CHECK(changes[0].stack == std::vector<std::string>{"a.py:2:g"});
  CHECK(changes[0].delta() == 450);
  CHECK(changes[1].stack == std::vector<std::string>{"<non-python>"});
  CHECK(changes[2].delta() == -60);
}

TEST_CASE("snapshot memory: malformed, empty and missing frames still load, as no stack", "[snapshot][memory][bad]") {
  using memcomm::test::PickleBuilder;
  PickleBuilder b;
  b.proto(4).empty_dict().mark().str("segments").empty_list();
  b.str("device_traces").empty_list().mark().empty_list().mark();
  auto alloc = [&](std::int64_t addr, const std::function<void()>& frames) {
    b.empty_dict().mark().kv("action", "alloc").kv("addr", addr).kv("size", 10).kv("stream", 0).kv("time_us", addr);
    if (frames) {
      b.str("frames");
      frames();
    }
    b.setitems();
  };
  alloc(1, {});                                        // no frames key
  alloc(2, [&] { b.empty_list(); });                   // an empty list
  alloc(3, [&] { b.integer(7); });                     // not a list
  alloc(4, [&] { b.empty_list().mark().integer(7).empty_dict().mark().kv("foo", 1).setitems().appends(); });  // no frame in it
  alloc(5, [&] {                                       // one good frame among junk, its line not a number
    b.empty_list().mark().integer(7);
    b.empty_dict().mark().kv("name", "f").kv("filename", "/x/a.py").kv("line", "twelve").setitems();
    b.empty_dict().mark().kv("name", "g").kv("filename", "/x/b.py").kv("line", std::int64_t{1} << 40).setitems();
    b.appends();
  });
  b.appends().appends().setitems().stop();
  const auto bytes = b.bytes();
  const snap::Snapshot s = snap::parse_snapshot(bytes.data(), bytes.size(), "frames.pickle");
  const snap::StackText text(s);
  const auto& events = s.device_traces.at(0);
  REQUIRE(events.size() == 5);
  for (std::size_t k = 0; k < 4; ++k) {
    CAPTURE(k);
    CHECK(events[k].stack == snap::kNoStack);
    CHECK(text.lines(events[k].stack) == std::vector<std::string>{"<non-python>"});
  }
  CHECK(text.lines(events[4].stack) == std::vector<std::string>{"b.py:0:g", "a.py:0:f"});
  const snap::SnapshotAllocations sa = snap::snapshot_allocations(s);
  const snap::MemoryAt end = snap::memory_at(sa.allocations, text, sa.allocations.end);
  CHECK(end.live_bytes == 50);
  CHECK(end.sites.size() == 2);
}

TEST_CASE("frames: a stack's category, guessed from its frames, innermost first", "[snapshot][frames]") {
  snap::Snapshot s;
  auto frame = [&](const char* name, const char* file) {
    return s.intern_frame({s.intern_string(name), s.intern_string(file), 1});
  };
  const std::uint32_t loop = frame("train", "/home/me/train.py");
  const std::uint32_t step = frame("step", "/venv/torch/optim/adamw.py");
  const std::uint32_t zero = frame("zero_grad", "/venv/torch/optim/optimizer.py");
  const std::uint32_t engine = frame("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", "??");
  const std::uint32_t fwd = frame("forward", "/home/me/model.py");
  const std::uint32_t apply = frame("_apply", "C:\\venv\\Lib\\torch\\nn\\modules\\module.py");
  const std::uint32_t loader = frame("__next__", "/venv/torch/utils/data/dataloader.py");
  const std::uint32_t empty = frame("empty_cuda", "??");
  using C = memcomm::prof::MemCategory;
  CHECK(snap::category_from_frames(s, s.intern_stack({empty, step, loop})) == C::OptimizerState);
  CHECK(snap::category_from_frames(s, s.intern_stack({empty, zero, loop})) == C::Gradient);
  CHECK(snap::category_from_frames(s, s.intern_stack({empty, engine})) == C::Gradient);
  CHECK(snap::category_from_frames(s, s.intern_stack({empty, fwd, loop})) == C::Activation);
  CHECK(snap::category_from_frames(s, s.intern_stack({empty, fwd, engine})) == C::Activation);  // recomputed
  CHECK(snap::category_from_frames(s, s.intern_stack({empty, apply, loop})) == C::Parameter);
  CHECK(snap::category_from_frames(s, s.intern_stack({empty, loader, loop})) == C::Input);
  CHECK(snap::category_from_frames(s, s.intern_stack({empty, loop})) == C::Unknown);
  CHECK(snap::category_from_frames(s, snap::kNoStack) == C::Unknown);
}

TEST_CASE("allocations: a trace that begins at the earliest time keeps its blocks from before it", "[allocations]") {
  // Found by the viewer's snapshot fuzzer: 1 ns before the first event does not exist there.
  const std::int64_t first = std::numeric_limits<std::int64_t>::min();
  prof::AllocationBuilder b;
  b.free_requested(first, block(0x10, 64));
  b.alloc(first + 5, block(0x20, 8));
  const prof::Allocations a = b.finish(first, first + 5);
  REQUIRE(a.list.size() == 2);
  CHECK(a.list[0].alloc_ns == first);
  CHECK(prof::peak_live(a).bytes == 8);
}
