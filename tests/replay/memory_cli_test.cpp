// `memcomm-trace memory` and `compare` as a user runs them, on the hand-built snapshot: the JSON
// contract, text mode, --at, and bad input (exit 2 with a message naming what was wrong).
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include "hand_snapshot.hpp"
#include "json_text.hpp"
#include "run_tool.hpp"

using memcomm::test::TempDir;
using Run = memcomm::test::ToolRun;

namespace {
Run trace_tool(const TempDir& dir, const std::string& args) { return memcomm::test::run_tool(dir, "memcomm-trace", args); }
}  // namespace

TEST_CASE("memory cli: --json gives at_ns, live_bytes and sites with stacks", "[cli][memory]") {
  TempDir dir("memory");
  const auto snap = dir.file("hand.pickle", memcomm::test::build_snapshot());
  Run r = trace_tool(dir, "memory " + snap.string() + " --at peak --json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = memcomm::test::parse_json(r.out);
  // Not the 3000 B block whose free completes first: pending free before the trace, never live in it.
  CHECK(j["live_bytes"] == 30 * memcomm::test::MiB + 1000);
  std::uint64_t sum = 0;
  for (const auto& s : j["sites"]) {
    sum += s["bytes"].get<std::uint64_t>();
    CHECK(s["stack"].is_array());
  }
  CHECK(sum == j["live_bytes"]);
  // The 30 MiB block's frames: the unwinder frame is filtered out, as memory_viz does.
  CHECK(j["sites"][0]["stack"] == nlohmann::json::array({"model.py:42:forward"}));
  Run all = trace_tool(dir, "memory " + snap.string() + " --at peak --json --all-frames");
  REQUIRE(all.code == 0);
  CHECK(memcomm::test::parse_json(all.out)["sites"][0]["stack"].size() == 2);
}

TEST_CASE("memory cli: --segments sums each device's segments as memory_viz's segsum does", "[cli][memory]") {
  TempDir dir("memory-segments");
  const auto snap = dir.file("hand.pickle", memcomm::test::build_snapshot());
  Run r = trace_tool(dir, "memory " + snap.string() + " --segments --json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = memcomm::test::parse_json(r.out);
  REQUIRE(j["devices"].size() == 2);
  const auto& d0 = j["devices"][0];  // one small segment: a 1024 B block for 1000 B asked, the rest free
  CHECK(d0["device"] == 0);
  CHECK(d0["reserved"] == 2 * memcomm::test::MiB);
  CHECK(d0["active"] == 1024);
  CHECK(d0["requested"] == 1000);
  CHECK(d0["free"] == 2 * memcomm::test::MiB - 1024);
  CHECK(d0["largest_free"] == 2 * memcomm::test::MiB - 1024);
  CHECK(d0["segments"][0]["pool"] == "small");
  const auto& d2 = j["devices"][1];  // an expandable segment, all free
  CHECK(d2["device"] == 2);
  CHECK(d2["active"] == 0);
  CHECK(d2["free"] == d2["reserved"]);
  CHECK(d2["segments"][0]["pool"] == "large, expandable");
  Run text = trace_tool(dir, "memory " + snap.string() + " --segments --device 2");
  REQUIRE(text.code == 0);
  CHECK(text.out.find("device 2: 1 segments, reserved 40.0 MiB") != std::string::npos);
  CHECK(text.out.find("device 0") == std::string::npos);
  // The end state only, and only a snapshot lists segments.
  Run at = trace_tool(dir, "memory " + snap.string() + " --segments --at peak");
  CHECK(at.code == 2);
  CHECK(at.err.find("--segments shows the snapshot's end state") != std::string::npos);
}

TEST_CASE("memory cli: --events lists each device's events with live and reserved bytes after each", "[cli][memory]") {
  TempDir dir("memory-events");
  const auto snap = dir.file("hand.pickle", memcomm::test::build_snapshot());
  Run r = trace_tool(dir, "memory " + snap.string() + " --events --json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = memcomm::test::parse_json(r.out);
  CHECK(j["relative"] == false);
  REQUIRE_FALSE(j["devices"].empty());
  for (const auto& d : j["devices"]) {
    REQUIRE_FALSE(d["events"].empty());
    // Walked back from the end state: after each event, its live bytes are the ones before it plus what it
    // added (a block ends at its free request, or at a completion that no request came before of a
    // block allocated in the trace).
    std::int64_t live = d["before"]["live"].get<std::int64_t>();
    std::set<std::int64_t> open, requested;
    for (const auto& e : d["events"]) {
      const std::string action = e["action"].get<std::string>();
      const auto size = e["size"].get<std::int64_t>();
      const auto addr = e.contains("addr") ? e["addr"].get<std::int64_t>() : -1;
      if (action == "alloc") {
        open.insert(addr);
        live += size;
      }
      if (action == "free_requested") {
        open.erase(addr);
        requested.insert(addr);
        live -= size;
      }
      if (action == "free_completed" && requested.erase(addr) == 0 && open.erase(addr) == 1) live -= size;
      CHECK(e["live"].get<std::int64_t>() == live);
      CHECK(e["reserved"].get<std::int64_t>() >= 0);
    }
  }
  const int first = j["devices"][0]["device"].get<int>();
  Run text = trace_tool(dir, "memory " + snap.string() + " --events --device " + std::to_string(first));
  REQUIRE(text.code == 0);
  CHECK(text.out.find("device " + std::to_string(first) + ": " + std::to_string(j["devices"][0]["events"].size()) +
                      " events") != std::string::npos);
  CHECK(text.out.find("model.py:42:forward") != std::string::npos);  // the 30 MiB block's frame
  // One listing at a time, the whole trace, and only a snapshot records the allocator's events.
  Run both = trace_tool(dir, "memory " + snap.string() + " --events --segments");
  CHECK(both.code == 2);
  CHECK(both.err.find("--events and --segments are two listings") != std::string::npos);
  Run at = trace_tool(dir, "memory " + snap.string() + " --events --at peak");
  CHECK(at.code == 2);
  CHECK(at.err.find("--events lists the whole trace") != std::string::npos);
  const auto other = dir.file("not-a-snapshot.txt", std::vector<std::uint8_t>{'h', 'i', '\n'});
  Run bad = trace_tool(dir, "memory " + other.string() + " --events");
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--events reads PyTorch memory snapshots") != std::string::npos);
}

TEST_CASE("memory cli: compare --segments lists the segments only in one snapshot", "[cli][memory]") {
  TempDir dir("compare-segments");
  const auto snap = dir.file("hand.pickle", memcomm::test::build_snapshot());
  Run same = trace_tool(dir, "compare " + snap.string() + " " + snap.string() + " --segments --json");
  INFO(same.err);
  REQUIRE(same.code == 0);
  const auto j = memcomm::test::parse_json(same.out);
  REQUIRE(j["devices"].size() == 2);
  for (const auto& d : j["devices"]) {
    CHECK(d["in_both"] == 1);
    CHECK(d["only_before"]["segments"].empty());
    CHECK(d["only_after"]["segments"].empty());
  }
  Run device = trace_tool(dir, "compare " + snap.string() + " " + snap.string() + " --segments --device 2");
  REQUIRE(device.code == 0);
  CHECK(device.out.find("device 2: 1 segments in both") != std::string::npos);
  CHECK(device.out.find("device 0") == std::string::npos);
  const auto text = dir.file("not-a-snapshot.txt", std::vector<std::uint8_t>{'h', 'i', '\n'});
  Run bad = trace_tool(dir, "compare " + snap.string() + " " + text.string() + " --segments");
  CHECK(bad.code == 2);
  CHECK(bad.err.find("not-a-snapshot.txt: --segments reads PyTorch memory snapshots") != std::string::npos);
}

TEST_CASE("memory cli: --device keeps one device's blocks", "[cli][memory]") {
  TempDir dir("memory-device");
  const auto snap = dir.file("hand.pickle", memcomm::test::build_snapshot());
  const auto live = [&](const std::string& options) {
    Run r = trace_tool(dir, "memory " + snap.string() + " --json " + options);
    INFO(r.err);
    REQUIRE(r.code == 0);
    return memcomm::test::parse_json(r.out)["live_bytes"].get<std::int64_t>();
  };
  // Each device's own peak: device 2's 30 MiB block; device 0's 5000 B block beside the 1000 B one
  // from before the trace.
  CHECK(live("--at peak --device 2") == 30 * memcomm::test::MiB);
  CHECK(live("--at peak --device 0") == 6000);
  CHECK(live("--at peak --device 1") == 0);
  CHECK(live("--at end --device 0") == 1000);
  CHECK(live("--at end --device 2") == 0);
  CHECK(live("--at end") == 1000);
  CHECK(trace_tool(dir, "memory " + snap.string() + " --device 256").code == 2);
  const Run absent = trace_tool(dir, "memory " + snap.string() + " --device 3");  // the file has devices 0-2
  CHECK(absent.code == 2);
  CHECK(absent.err.find("has no device 3 (devices: 0, 1, 2)") != std::string::npos);
}

TEST_CASE("memory cli: a snapshot without times says it counts events", "[cli][memory]") {
  TempDir dir("memory-untimed");
  const auto snap = dir.file("untimed.pickle", memcomm::test::build_snapshot(false));
  const Run all = trace_tool(dir, "memory " + snap.string() + " --at peak");
  REQUIRE(all.code == 0);
  CHECK(all.out.find("counts events, 1 us each") != std::string::npos);
  CHECK(all.err.find("aligned by index") != std::string::npos);  // two devices' events, no moments
  const Run one = trace_tool(dir, "memory " + snap.string() + " --at peak --device 0");
  REQUIRE(one.code == 0);
  CHECK(one.err.find("aligned by index") == std::string::npos);
  const auto timed = dir.file("timed.pickle", memcomm::test::build_snapshot());
  const Run t = trace_tool(dir, "memory " + timed.string() + " --at peak");
  CHECK(t.out.find(" s after the trace's first event") != std::string::npos);
  CHECK(t.err.empty());
}

TEST_CASE("memory cli: a clock that steps back, and a trace its end state does not reflect, are told", "[cli][memory]") {
  TempDir dir("memory-disagree");
  memcomm::test::PickleBuilder b;  // no segments; two allocs never freed, the second stamped 10 us earlier
  bool first_frames = true;
  b.proto(4).empty_dict().mark().str("segments").empty_list().str("device_traces").empty_list().mark().empty_list().mark();
  memcomm::test::event(b, {"alloc", 4096, 100, 20, false}, first_frames);
  memcomm::test::event(b, {"alloc", 8192, 50, 10, false}, first_frames);
  b.appends().appends().setitems().stop();
  const auto snap = dir.file("odd.pickle", b.bytes());
  const Run peak = trace_tool(dir, "memory " + snap.string() + " --at peak --json");
  INFO(peak.err);
  REQUIRE(peak.code == 0);
  CHECK(memcomm::test::parse_json(peak.out)["live_bytes"] == 150);
  CHECK(peak.err.find("time_us goes back 1 time (by up to 10 us)") != std::string::npos);
  const Run events = trace_tool(dir, "memory " + snap.string() + " --events");
  INFO(events.err);
  REQUIRE(events.code == 0);
  CHECK(events.err.find("goes back 1 time") != std::string::npos);
  CHECK(events.err.find("device 0: the trace and the end state disagree") != std::string::npos);
  CHECK(events.err.find("live goes down to -150 B") != std::string::npos);
}

TEST_CASE("memory cli: --events and --at agree on a block whose free was requested before the trace", "[cli][memory]") {
  // A ring buffer that starts between a block's free request and its completion: --at never counts
  // the block (See Note [Allocations before the trace]); --events took its completion for the
  // block's end and, walking back from the end state, counted it live before it (1100 B for 100).
  TempDir dir("memory-lone");
  memcomm::test::PickleBuilder b;
  bool first_frames = true;
  b.proto(4).empty_dict().mark().str("segments").empty_list().str("device_traces").empty_list().mark().empty_list().mark();
  memcomm::test::event(b, {"alloc", 4096, 100, 10, false}, first_frames);
  memcomm::test::event(b, {"free_requested", 4096, 100, 15, false}, first_frames);
  memcomm::test::event(b, {"free_completed", 4096, 100, 16, false}, first_frames);
  memcomm::test::event(b, {"free_completed", 65536, 1000, 20, false}, first_frames);
  b.appends().appends().setitems().stop();
  const auto snap = dir.file("lone.pickle", b.bytes());
  const Run peak = trace_tool(dir, "memory " + snap.string() + " --at peak --json");
  REQUIRE(peak.code == 0);
  CHECK(memcomm::test::parse_json(peak.out)["live_bytes"] == 100);
  const Run events = trace_tool(dir, "memory " + snap.string() + " --events --json");
  INFO(events.err);
  REQUIRE(events.code == 0);
  const auto d = memcomm::test::parse_json(events.out)["devices"][0];
  CHECK(d["before"]["live"] == 0);
  REQUIRE(d["events"].size() == 4);
  CHECK(d["events"][0]["live"] == 100);  // 1100 B before
  CHECK(d["events"][3]["live"] == 0);
  CHECK(events.err.empty());
}

TEST_CASE("memory cli: a snapshot of memcomm's CPU allocator is device 255 and says host memory", "[cli][memory]") {
  TempDir dir("memory-host");
  memcomm::test::PickleBuilder b;  // the settings memcomm.dump_snapshot writes on the CPU: device 0 in the file
  bool first_frames = true;
  b.proto(4).empty_dict().mark().str("segments").empty_list().str("device_traces").empty_list().empty_list().mark();
  memcomm::test::event(b, {"alloc", 4096, 100, 10, false}, first_frames);
  b.appends().op('a');
  b.str("allocator_settings").empty_dict().mark().str("memcomm").boolean(true).str("host").boolean(true).setitems();
  b.setitems().stop();
  const auto snap = dir.file("host.pickle", b.bytes());
  const Run r = trace_tool(dir, "memory " + snap.string() + " --device 255");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find(snap.string() + ", host memory: at end") != std::string::npos);
  CHECK(trace_tool(dir, "memory " + snap.string() + " --device 0").code == 2);
}

TEST_CASE("memory cli: text mode and compare", "[cli][memory]") {
  TempDir dir("memory-text");
  const auto snap = dir.file("hand.pickle", memcomm::test::build_snapshot());
  Run r = trace_tool(dir, "memory " + snap.string());
  REQUIRE(r.code == 0);
  CHECK(r.out.find("1000 B live in 1 sites") != std::string::npos);
  CHECK(r.out.find("<non-python>") != std::string::npos);
  Run same = trace_tool(dir, "compare " + snap.string() + " " + snap.string() + " --at peak");
  REQUIRE(same.code == 0);
  CHECK(same.out.find("no site changed") != std::string::npos);
  Run same_json = trace_tool(dir, "compare " + snap.string() + " " + snap.string() + " --at peak --json");
  REQUIRE(same_json.code == 0);
  const auto sites = memcomm::test::parse_json(same_json.out)["sites"];
  CHECK(sites.size() == 2);  // every site at the peak (the 30 MiB block, the end state's), unchanged ones too
  for (const auto& site : sites) CHECK(site["delta"] == 0);
}

TEST_CASE("memory cli: a trace cut short is read up to its last chunk, with the warning every subcommand gives", "[cli][memory]") {
  TempDir dir("memory-cut");
  std::ifstream in(memcomm::test::source_dir() + "/tests/allocator/data/trainer_mlp_accum2.rank1.mct", std::ios::binary);
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 30000);
  bytes.resize(30000);
  const auto cut = dir.file("cut.rank1.mct", bytes);
  for (const std::string& sub : {"memory " + cut.string(), "compare " + cut.string() + " " + cut.string()}) {
    CAPTURE(sub);
    Run r = trace_tool(dir, sub);
    CHECK(r.code == 0);
    CHECK(r.err.find("warning: " + cut.string() + ": chunk") != std::string::npos);
  }
}

TEST_CASE("memory cli: bad input and bad options exit 2 with a message", "[cli][memory][bad]") {
  TempDir dir("memory-bad");
  const auto snap = dir.file("hand.pickle", memcomm::test::build_snapshot());
  const auto junk = dir.file("junk.bin", {0x80, 0x04, 0x95, 0xff});  // a pickle header, then nothing
  const auto text = dir.file("notes.txt", {'h', 'i', '\n'});
  struct Case {
    std::string args, says;
  };
  for (const Case& c : {Case{"memory " + snap.string() + " --at soon", "--at"},
                        Case{"memory " + snap.string() + " --rows 0", "--rows"},
                        Case{"memory " + junk.string(), junk.filename().string()},
                        Case{"memory " + text.string(), "notes.txt"},
                        Case{"memory " + snap.string() + " --rank 3 --at end", "--rank 3"},  // a snapshot has no ranks
                        Case{"compare " + snap.string() + " " + snap.string() + " --rank 3", "--rank 3"},
                        Case{"compare " + snap.string(), "AFTER"},
                        Case{"memory " + (dir.path() / "missing.pickle").string(), "missing.pickle"}}) {
    CAPTURE(c.args);
    Run r = trace_tool(dir, c.args);
    CHECK(r.code == 2);
    CHECK(r.err.find(c.says) != std::string::npos);
  }
}
