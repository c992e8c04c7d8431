// The snapshot model and request rebuilding on a hand-built snapshot that has every awkward
// feature: pre-trace blocks, an oom without addr, markers, unknown actions, missing time_us,
// expandable segment_map/unmap, an empty middle device, extra fields and shared frames.
#include "memcomm/replay/replayer.hpp"
#include "memcomm/replay/requests.hpp"
#include "memcomm/snapshot/frames.hpp"
#include "memcomm/snapshot/snapshot.hpp"
#include "memcomm_test.hpp"
#include "hand_snapshot.hpp"

using memcomm::test::PickleBuilder;
namespace snap = memcomm::snapshot;
namespace prof = memcomm::prof;
using memcomm::replay::Request;

using memcomm::test::build_snapshot;
using memcomm::test::MiB;

TEST_CASE("snapshot: model fields from a hand-built snapshot", "[snapshot]") {
  auto bytes = build_snapshot();
  snap::Snapshot s = snap::parse_snapshot(bytes.data(), bytes.size(), "hand.pickle");
  REQUIRE(s.device_traces.size() == 3);
  CHECK(s.event_count() == 12);
  REQUIRE(s.segments.size() == 2);
  const auto& seg0 = s.segments[0];
  CHECK(seg0.device == 0);
  CHECK(seg0.is_small);
  CHECK_FALSE(seg0.is_expandable);
  REQUIRE(seg0.blocks.size() == 2);
  CHECK(seg0.blocks[0].is_active());
  CHECK(seg0.blocks[1].address == 16 * MiB + 1024);  // implicit address continues from the previous block
  CHECK(seg0.blocks[1].state == snap::BlockState::inactive);
  CHECK(s.segments[1].is_expandable);

  const auto& d0 = s.device_traces[0];
  CHECK(d0[0].kind == prof::EventKind::FreeCompleted);
  CHECK(s.action_label(d0[0]) == "free_completed");
  CHECK(d0[1].time_us == 11);
  CHECK(d0[2].kind == prof::EventKind::Invalid);  // a marker, no allocator event (Note [Snapshot actions])
  CHECK(s.action_label(d0[2]) == "snapshot");
  CHECK(d0[3].kind == prof::EventKind::FreeRequested);  // once decoded as an unknown action
  CHECK(s.action_label(d0[3]) == "free_requested");
  CHECK(d0[5].kind == prof::EventKind::Invalid);
  CHECK(s.action_label(d0[5]) == "future_action");
  CHECK(s.device_traces[1].empty());
  const auto& d2 = s.device_traces[2];
  CHECK_FALSE(d2[0].has_time());
  CHECK(d2[2].kind == prof::EventKind::Oom);
  CHECK_FALSE(d2[2].has_addr());
  CHECK(d2[2].size == 1024 * MiB);

  // Frames: the two alloc events and the free_requested share one interned stack.
  REQUIRE(d0[1].stack != snap::kNoStack);
  CHECK(d0[3].stack == d0[1].stack);
  CHECK(d2[1].stack == d0[1].stack);
  CHECK(s.stack_count() == 1);
  auto [frames, n] = s.stack(d0[1].stack);
  REQUIRE(n == 2);
  CHECK(s.str(s.frame(frames[0]).filename) == "??");
  CHECK(snap::shown_frame(s, d0[1].stack) == "model.py:42:forward");  // skips the unwinder frame
  CHECK(snap::shown_frame(s, snap::kNoStack).empty());

  CHECK(s.settings.present);
  CHECK(s.settings.expandable_segments);
  CHECK(s.settings.max_split_size == -1);
  CHECK(s.settings.alloc_conf == "expandable_segments:True");
  CHECK(s.settings.roundup_power2_divisions.size() == 2);

  // memcomm's allocator marks its snapshots: its CUDA adapter's PYTORCH_CUDA_ALLOC_CONF, its host snapshots' keys.
  for (const bool cuda : {true, false}) {
    PickleBuilder b;
    b.proto(4).empty_dict().mark();
    b.str("segments").empty_list();
    b.str("device_traces").empty_list().mark().empty_list().appends();
    b.str("allocator_settings").empty_dict().mark();
    if (cuda) b.kv("PYTORCH_CUDA_ALLOC_CONF", "memcomm");
    else b.str("memcomm").boolean(true).str("host").boolean(true);
    b.setitems().setitems().stop();
    const snap::Snapshot marked = snap::parse_snapshot(b.bytes().data(), b.bytes().size(), "marked.pickle");
    CHECK(marked.settings.memcomm);
    CHECK(marked.settings.host == !cuda);
  }

  // Without frames the model still loads, with no stacks.
  snap::ParseOptions no_frames;
  no_frames.keep_frames = false;
  snap::Snapshot s2 = snap::parse_snapshot(bytes.data(), bytes.size(), "hand.pickle", no_frames);
  CHECK(s2.stack_count() == 0);
  CHECK(s2.device_traces[0][1].stack == snap::kNoStack);
}

TEST_CASE("snapshot: request rebuilding handles pre-trace blocks, oom, markers and several devices", "[snapshot][requests]") {
  auto bytes = build_snapshot();
  auto trace = memcomm::replay::build_requests(snap::parse_snapshot(bytes.data(), bytes.size(), "hand.pickle"));
  REQUIRE(trace.devices.size() == 2);  // device 1 has neither events nor segments
  const auto& d0 = trace.devices[0];
  CHECK(d0.device == 0);
  CHECK(d0.preexisting_blocks == 2);  // the freed-but-never-allocated one and the end-state active one
  CHECK(d0.preexisting_bytes == 3000 + 1000);
  CHECK(d0.peak_live == 1000 + 5000);  // the 3000-byte block is freed before the 5000-byte alloc
  CHECK(d0.trace_events == 6);
  CHECK(d0.anomalies == 0);
  REQUIRE(d0.requests.size() == 2 + 3);
  CHECK(d0.requests[0].op == Request::Op::alloc);
  CHECK(d0.requests[0].size == 3000);  // pre-trace blocks in address order: 5 MiB, then 16 MiB
  CHECK(d0.requests[1].size == 1000);
  CHECK(d0.traced_allocs() == 1);  // the 5000-byte block: the two before the trace are not the trace's
  CHECK(d0.recorded.known);
  CHECK(d0.recorded.at_start == 2 * MiB);
  CHECK(d0.recorded.peak == 2 * MiB);
  CHECK_FALSE(d0.recorded.starts_empty());

  const auto& d2 = trace.devices[1];
  CHECK(d2.device == 2);
  CHECK(d2.preexisting_blocks == 0);
  CHECK(d2.peak_live == 30 * MiB);
  CHECK(d2.traced_allocs() == 1);
  CHECK(d2.trace_ooms == 1);
  CHECK(d2.recorded.starts_empty());
  CHECK(d2.recorded.expandable);
  CHECK(d2.recorded.peak == 40 * MiB);
  CHECK(d2.recorded.source_allocs == 2);
  CHECK(d2.recorded.source_frees == 1);
  CHECK(trace.settings.expandable_segments);
}

TEST_CASE("snapshot: every truncation of the hand-built snapshot fails with ReadError", "[snapshot][bad]") {
  auto bytes = build_snapshot();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    CHECK_THROWS_AS(snap::parse_snapshot(bytes.data(), n, "cut.pickle"), snap::ReadError);
  }
}

TEST_CASE("snapshot: well-formed pickles of the wrong shape are refused with the field named", "[snapshot][bad]") {
  PickleBuilder b;  // {'device_traces': [[{'action': 5}]]}
  b.proto(4).empty_dict().str("device_traces").empty_list().empty_list().empty_dict().kv("action", 5).op('s').op('a').op('a').op('s').stop();
  try {
    snap::parse_snapshot(b.data(), b.size(), "shape.pickle");
    FAIL("accepted an int action");
  } catch (const snap::ReadError& e) {
    CHECK(std::string(e.what()).find("device_traces[0][0].action: expected str, got int") != std::string::npos);
  }
  PickleBuilder neg;  // a negative size
  neg.proto(4).empty_dict().str("device_traces").empty_list().empty_list().empty_dict().mark().kv("action", "alloc").kv("size", -5)
      .setitems().op('a').op('a').op('s').stop();
  CHECK_THROWS_WITH(snap::parse_snapshot(neg.data(), neg.size(), "neg.pickle"), Catch::Contains("negative value -5"));
}

namespace {
// {'device_traces': [[{'action': 'alloc', 'addr': addr, 'size': size, 'time_us': time_us}]]}
std::string one_event_error(std::int64_t addr, std::int64_t size, std::int64_t time_us, const char* action = "alloc") {
  PickleBuilder b;
  b.proto(4).empty_dict().str("device_traces").empty_list().empty_list().empty_dict().mark().kv("action", action)
      .kv("addr", addr).kv("size", size).kv("time_us", time_us).setitems().op('a').op('a').op('s').stop();
  try {
    snap::parse_snapshot(b.data(), b.size(), "one.pickle");
  } catch (const snap::ReadError& e) {
    return e.what();
  }
  return "accepted";
}
// {'segments': [{'device': device, 'address': 4096, 'total_size': 2 MiB, 'blocks': []}]}
std::string segment_error(std::int64_t device) {
  PickleBuilder b;
  b.proto(4).empty_dict().str("segments").empty_list().empty_dict().mark().kv("device", device).kv("address", 4096)
      .kv("total_size", 2 * MiB).str("blocks").empty_list().setitems().op('a').op('s').stop();
  try {
    snap::parse_snapshot(b.data(), b.size(), "seg.pickle");
  } catch (const snap::ReadError& e) {
    return e.what();
  }
  return "accepted";
}
// {'segments': [{'device': 0, 'address': 4096, 'total_size': total, 'blocks': [{'size': size,
//   'requested_size': requested, 'state': state}]}]}
std::string block_error(std::int64_t total, std::int64_t size, std::int64_t requested, const std::string& state) {
  PickleBuilder b;
  b.proto(4).empty_dict().str("segments").empty_list().empty_dict().mark().kv("device", 0).kv("address", 4096)
      .kv("total_size", total).str("blocks").empty_list().empty_dict().mark().kv("size", size)
      .kv("requested_size", requested).kv("state", state).setitems().op('a').setitems().op('a').op('s').stop();
  try {
    snap::parse_snapshot(b.data(), b.size(), "block.pickle");
  } catch (const snap::ReadError& e) {
    return e.what();
  }
  return "accepted";
}
}  // namespace

TEST_CASE("snapshot: values no allocator writes are refused, not wrapped into figures (Note [Values no real snapshot holds])",
          "[snapshot][bad]") {
  CHECK(one_event_error(4096, 512, 1'700'000'000'000'000) == "accepted");
  CHECK(one_event_error(4096, std::int64_t{1} << 57, 1) == "accepted");  // the largest address space's size
  CHECK(block_error(2 * MiB, 2 * MiB, 100, "active_allocated") == "accepted");
  // A segment of 10 bytes holding 2 MiB read as fragmentation -511.
  CHECK_THAT(block_error(10, 2 * MiB, 100, "active_allocated"),
             Catch::Contains("segments[0]: its blocks hold 2097152 bytes, more than its total_size 10"));
  CHECK_THAT(block_error(2 * MiB, 2 * MiB, 4 * MiB, "active_allocated"),
             Catch::Contains("segments[0].blocks[0]: requested_size 4194304 is more than its size 2097152"));
  // A free block keeps an earlier allocation's requested_size: PyTorch's own files hold such.
  CHECK(block_error(2 * MiB, 2 * MiB, 4 * MiB, "inactive") == "accepted");
  CHECK_THAT(one_event_error(4096, (std::int64_t{1} << 57) + 1, 1), Catch::Contains("more than any address space holds"));
  CHECK_THAT(one_event_error(4096, std::int64_t{1} << 62, 1), Catch::Contains("device_traces[0][0].size"));
  // An out-of-memory event records what the script asked for: a shape computed wrong asks for petabytes.
  CHECK(one_event_error(4096, std::int64_t{1} << 62, 1, "oom") == "accepted");
  CHECK_THAT(one_event_error(4096, 512, 9'300'000'000'000'000), Catch::Contains("time_us 9300000000000000 is out of range"));
  CHECK_THAT(one_event_error(4096, 512, -9'300'000'000'000'000), Catch::Contains("out of range"));
  CHECK(one_event_error(4096, 512, 9'223'372'036'854'775) == "accepted");  // its nanoseconds still fit
  CHECK(segment_error(0) == "accepted");
  CHECK(segment_error(254) == "accepted");
  CHECK_THAT(segment_error(-1), Catch::Contains("segments[0]: device -1 is out of range (0-254)"));
  CHECK_THAT(segment_error(255), Catch::Contains("device 255 is out of range"));
}

TEST_CASE("snapshot: an event's compile context and user metadata are kept, torch's placeholders are not", "[snapshot]") {
  // {'device_traces': [[{alloc, compile_context, user_metadata}, {free_requested, 'N/A', ''}]]}
  PickleBuilder b;
  b.proto(4).empty_dict().str("device_traces").empty_list().empty_list();
  b.empty_dict().mark().kv("action", "alloc").kv("addr", 4096).kv("size", 512)
      .kv("compile_context", "torch/_inductor: compiled graph 0/1").kv("user_metadata", "phase=warmup").setitems().op('a');
  b.empty_dict().mark().kv("action", "free_requested").kv("addr", 4096).kv("size", 512)
      .kv("compile_context", "N/A").kv("user_metadata", "").setitems().op('a');
  b.op('a').op('s').stop();
  const snap::Snapshot s = snap::parse_snapshot(b.data(), b.size(), "notes.pickle");
  const snap::EventNotes* notes = s.notes_of(0, 0);
  REQUIRE(notes != nullptr);
  CHECK(s.str(notes->compile_context) == "torch/_inductor: compiled graph 0/1");
  CHECK(s.str(notes->user_metadata) == "phase=warmup");
  CHECK(s.notes_of(0, 1) == nullptr);
  snap::ParseOptions replay;  // replay keeps no frames, nor notes
  replay.keep_frames = false;
  CHECK(snap::parse_snapshot(b.data(), b.size(), "notes.pickle", replay).notes_of(0, 0) == nullptr);
}

TEST_CASE("snapshot: memcomm's host snapshot is device 255, as every tool names the host (Note [A host snapshot's device])",
          "[snapshot]") {
  const auto build = [](bool host) {
    PickleBuilder b;  // one segment and one alloc on device 0, and the settings memcomm.dump_snapshot("cpu") writes
    bool first = true;
    b.proto(4).empty_dict().mark().str("segments").empty_list().empty_dict().mark().kv("device", 0).kv("address", 4096)
        .kv("total_size", 2 * MiB).str("blocks").empty_list().setitems().op('a');
    b.str("device_traces").empty_list().empty_list().mark();
    memcomm::test::event(b, {"alloc", 4096, 100, 1, false}, first);
    b.appends().op('a');
    b.str("allocator_settings").empty_dict().mark().str("memcomm").boolean(true).str("host").boolean(host).setitems();
    b.setitems().stop();
    return snap::parse_snapshot(b.data(), b.size(), "host.pickle");
  };
  const snap::Snapshot host = build(true);
  REQUIRE(host.device_traces.size() == 256);
  CHECK(host.device_traces[255].size() == 1);
  CHECK(host.device_traces[0].empty());
  CHECK(host.segments[0].device == 255);
  const auto trace = memcomm::replay::build_requests(host);
  REQUIRE(trace.devices.size() == 1);
  CHECK(trace.devices[0].device == 255);
  const snap::Snapshot gpu = build(false);
  CHECK(gpu.device_traces.size() == 1);
  CHECK(gpu.segments[0].device == 0);
}

TEST_CASE("snapshot: a block past the top of the address space is refused", "[snapshot][bad]") {
  PickleBuilder b;  // an address in the upper half (a 9-byte LONG1) whose block runs past 2^64
  b.proto(4).empty_dict().str("device_traces").empty_list().empty_list().empty_dict().mark().kv("action", "alloc").str("addr")
      .op(0x8a).raw(9).le(~std::uint64_t{0} - 100, 8).raw(0).kv("size", 512).setitems().op('a').op('a').op('s').stop();
  CHECK_THROWS_WITH(snap::parse_snapshot(b.data(), b.size(), "wrap.pickle"), Catch::Contains("wraps past the top of the address space"));
}

TEST_CASE("snapshot: shared references that would expand a tiny file into a huge model are refused", "[snapshot][hostile]") {
  PickleBuilder b;  // 250 devices sharing one list of 1000 references to one event: 250,000 events from ~3 KB
  b.proto(4).empty_dict().str("device_traces").empty_list().mark();
  b.empty_list().memoize().mark();
  b.empty_dict().mark().kv("action", "alloc").kv("addr", 4096).kv("size", 512).setitems().memoize();
  for (int k = 0; k < 999; ++k) b.binget(1);
  b.appends();
  for (int k = 0; k < 249; ++k) b.binget(0);
  b.appends().op('s').stop();
  CHECK(b.size() < 8192);
  CHECK_THROWS_WITH(snap::parse_snapshot(b.data(), b.size(), "bomb.pickle"), Catch::Contains("more entries than it could hold"));
}

TEST_CASE("snapshot: a block freed twice counts as an anomaly, not as a second pre-trace block", "[snapshot][requests]") {
  PickleBuilder b;
  bool first = true;
  b.proto(4).empty_dict().mark().str("device_traces").empty_list().mark().empty_list().mark();
  memcomm::test::event(b, {"alloc", 8 * MiB, 4096, 1, false}, first);
  memcomm::test::event(b, {"free_completed", 8 * MiB, 4096, 2, false}, first);
  memcomm::test::event(b, {"free_completed", 8 * MiB, 4096, 3, false}, first);
  memcomm::test::event(b, {"free_requested", 9 * MiB, 100, 4, false}, first);  // a pre-trace block...
  memcomm::test::event(b, {"free_completed", 9 * MiB, 100, 5, false}, first);  // ...freed normally
  b.appends().appends().setitems().stop();
  auto trace = memcomm::replay::build_requests(snap::parse_snapshot(b.data(), b.size(), "double.pickle"));
  REQUIRE(trace.devices.size() == 1);
  CHECK(trace.devices[0].anomalies == 1);
  CHECK(trace.devices[0].preexisting_blocks == 1);
  CHECK(trace.devices[0].preexisting_bytes == 100);
  CHECK(trace.devices[0].peak_live == 4096 + 100);
}

TEST_CASE("snapshot: segments that never held the live blocks give no `recorded` row, with a note", "[snapshot][requests]") {
  // See Note [Segments that cannot hold the blocks]: 2 MiB of segments, 8 MiB allocated in the trace.
  PickleBuilder b;
  bool first = true;
  b.proto(4).empty_dict().mark();
  b.str("segments").empty_list().mark();
  b.empty_dict().mark().kv("device", 0).kv("address", 64 * MiB).kv("total_size", 2 * MiB).kv("stream", 0);
  b.str("blocks").empty_list().setitems();
  b.appends();
  b.str("device_traces").empty_list().mark().empty_list().mark();
  memcomm::test::event(b, {"alloc", 100 * MiB, 8 * MiB, 1, false}, first);
  b.appends().appends().setitems().stop();
  const auto trace = memcomm::replay::build_requests(snap::parse_snapshot(b.data(), b.size(), "short.pickle"));
  REQUIRE(trace.devices.size() == 1);
  CHECK(trace.devices[0].recorded.contradicted);
  REQUIRE(trace.notes.size() == 1);
  CHECK_THAT(trace.notes[0], Catch::Contains("never held its live blocks"));
  const auto results = memcomm::replay::replay_all(trace, {memcomm::replay::kRecordedPolicy, "memcomm"}, 0);
  REQUIRE(results.size() == 1);
  CHECK(results[0].policy == "memcomm");
}

TEST_CASE("snapshot: an empty segment list is an end state: nothing reserved at the end", "[snapshot][requests]") {
  // After empty_cache() a snapshot lists no segments. Its trace began mid-run: a 200 MiB segment
  // from before it holds a 90 MiB block, then both go. The cache held 200 MiB, not 0, at the start.
  PickleBuilder b;
  bool first = true;
  b.proto(4).empty_dict().mark();
  b.str("segments").empty_list();
  b.str("device_traces").empty_list().mark().empty_list().mark();
  memcomm::test::event(b, {"alloc", 100 * MiB, 90 * MiB, 1, false}, first);
  memcomm::test::event(b, {"free_requested", 100 * MiB, 90 * MiB, 2, false}, first);
  memcomm::test::event(b, {"free_completed", 100 * MiB, 90 * MiB, 3, false}, first);
  memcomm::test::event(b, {"segment_free", 100 * MiB, 200 * MiB, 4, false}, first);
  b.appends().appends().setitems().stop();
  const auto trace = memcomm::replay::build_requests(snap::parse_snapshot(b.data(), b.size(), "emptied.pickle"));
  REQUIRE(trace.devices.size() == 1);
  CHECK(trace.devices[0].recorded.at_start == 200 * MiB);
  CHECK(trace.devices[0].recorded.peak == 200 * MiB);
  CHECK(trace.devices[0].recorded.at_end == 0);
}

TEST_CASE("snapshot: expandable segments are told by the setting, else by the segments and page maps", "[snapshot]") {
  snap::Snapshot s;  // torch < 2.3 wrote no allocator_settings
  CHECK_FALSE(s.expandable_segments());
  s.device_traces.push_back({});
  s.device_traces[0].push_back(snap::Event{});
  s.device_traces[0][0].kind = memcomm::prof::EventKind::SegmentMap;
  CHECK(s.expandable_segments());
  s.device_traces.clear();
  s.segments.emplace_back();
  s.segments[0].is_expandable = true;
  CHECK(s.expandable_segments());
  s.settings.present = true;  // a recorded setting is the run's word
  CHECK_FALSE(s.expandable_segments());
}

TEST_CASE("snapshot: a string that is not UTF-8 (surrogates aside) is a corrupt file, as Python's unpickler says", "[snapshot][bad]") {
  for (const std::string& bad : {std::string("ab\xFF"), std::string("\xC0\x80"), std::string("\xE2\x82"),
                                 std::string("\xF4\x90\x80\x80")}) {
    PickleBuilder b;
    b.proto(4).empty_dict().mark().str("device_traces").empty_list().str(bad).empty_list().setitems().stop();
    CHECK_THROWS_WITH(snap::parse_snapshot(b.data(), b.size(), "bad.pickle"), Catch::Contains("is not UTF-8"));
  }
  PickleBuilder ok;  // two-, three- and four-byte forms
  ok.proto(4).empty_dict().mark().str("segments").empty_list().str("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80")
      .empty_list().setitems().stop();
  CHECK_NOTHROW(snap::parse_snapshot(ok.data(), ok.size(), "ok.pickle"));
  // A lone surrogate, as pickle.dumps writes a file name that is not UTF-8 ("caf\udce9.py"): Python
  // reads it back, so it is no corrupt file.
  PickleBuilder lone;
  lone.proto(4).empty_dict().mark().str("segments").empty_list().str("caf\xED\xB3\xA9.py").empty_list().setitems().stop();
  CHECK_NOTHROW(snap::parse_snapshot(lone.data(), lone.size(), "lone.pickle"));
}
