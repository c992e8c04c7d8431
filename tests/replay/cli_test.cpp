// memcomm-replay as a user runs it: good input gives a table and JSON; bad input exits 2 with a
// message that names the file (and the byte offset for pickle damage).
#include <sys/stat.h>

#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "hand_snapshot.hpp"
#include "json_text.hpp"
#include "memcomm/replay/call_bound.hpp"
#include "memcomm/replay/requests.hpp"
#include "memcomm/trace/event.hpp"
#include "memcomm_test.hpp"
#include "run_tool.hpp"

using memcomm::test::slurp;
using memcomm::test::TempDir;
using Run = memcomm::test::ToolRun;
namespace rp = memcomm::replay;

namespace {

Run run(const TempDir& dir, const std::string& args) { return memcomm::test::run_replay(dir, args); }

}  // namespace

TEST_CASE("cli: a good snapshot gives the table and the JSON list", "[cli]") {
  TempDir dir;
  auto snap = dir.file("hand.pickle", memcomm::test::build_snapshot());
  auto json = dir.path() / "out.json";
  Run r = run(dir, snap.string() + " --policy recorded,pytorch,pytorch-expandable --capacity 1GiB --check --json " + json.string());
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("pytorch-expandable") != std::string::npos);
  auto list = memcomm::test::parse_json(slurp(json));
  REQUIRE(list.is_array());
  REQUIRE(list.size() == 2 * 3);  // 2 devices x 3 policies
  for (const auto& o : list) {
    for (const char* key : {"file", "device", "policy", "peak_live", "peak_reserved", "ooms", "source_allocs", "events", "seconds"}) {
      CHECK(o.contains(key));
    }
  }
  CHECK(list[0]["policy"] == "recorded");
  CHECK(list[0]["peak_live"] == 6000);
}

TEST_CASE("cli: truncated, corrupt and hostile pickles exit 2 naming file and byte offset", "[cli][bad]") {
  TempDir dir;
  auto good = memcomm::test::build_snapshot();

  std::vector<std::uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2));
  auto truncated = dir.file("truncated.pickle", cut);
  Run r = run(dir, truncated.string());
  CHECK(r.code == 2);
  CHECK(r.err.find("truncated.pickle") != std::string::npos);
  CHECK(r.err.find("byte offset") != std::string::npos);
  CHECK(r.err.find("truncated input") != std::string::npos);

  auto corrupt_bytes = good;
  corrupt_bytes[2] = 0xfe;  // the opcode after PROTO
  auto corrupt = dir.file("corrupt.pickle", corrupt_bytes);
  r = run(dir, corrupt.string());
  CHECK(r.code == 2);
  CHECK(r.err.find("corrupt.pickle: byte offset 2: invalid opcode byte 0xfe") != std::string::npos);

  memcomm::test::PickleBuilder hostile;
  hostile.proto(2).op('c').text("os\nsystem\n").str("echo pwned").op(0x85).op('R').stop();
  auto evil = dir.file("evil.pickle", hostile.bytes());
  r = run(dir, evil.string());
  CHECK(r.code == 2);
  CHECK(r.err.find("evil.pickle: byte offset 2: GLOBAL opcode refused") != std::string::npos);

  memcomm::test::PickleBuilder not_a_snapshot;
  not_a_snapshot.proto(4).str("a string").stop();  // (a list is torch.cuda.memory_snapshot()'s segments)
  auto wrong = dir.file("string.pickle", not_a_snapshot.bytes());
  r = run(dir, wrong.string());
  CHECK(r.code == 2);
  CHECK(r.err.find("not a PyTorch memory snapshot") != std::string::npos);

  auto mct = dir.file("run.mct", {'M', 'E', 'M', 'C', 'T', 'R', 'C', 0x1A, 0, 0});
  r = run(dir, mct.string());
  CHECK(r.code == 2);  // a broken .mct header: the profiler's reader names the file
  CHECK(r.err.find("run.mct") != std::string::npos);

  auto text = dir.file("notes.txt", {'h', 'i', '\n'});
  r = run(dir, text.string());
  CHECK(r.code == 2);
  CHECK(r.err.find("unknown trace format") != std::string::npos);
}

TEST_CASE("cli: usage errors exit 2", "[cli][bad]") {
  TempDir dir;
  auto snap = dir.file("hand.pickle", memcomm::test::build_snapshot());
  CHECK(run(dir, "").code == 2);                                                   // no FILE
  CHECK(run(dir, (dir.path() / "missing.pickle").string()).code == 2);            // cannot open
  CHECK(run(dir, snap.string() + " --capacity 12XB").code == 2);                  // bad size
  CHECK(run(dir, snap.string() + " --capacity -5").code == 2);
  Run r = run(dir, snap.string() + " --policy pytorch,bogus");
  CHECK(r.code == 2);
  CHECK(r.err.find("unknown policy 'bogus'") != std::string::npos);
  CHECK(run(dir, "--help").code == 0);
}

TEST_CASE("cli: --json - writes only the JSON to stdout (it parses) and the table to stderr", "[cli][json]") {
  TempDir dir;
  auto snap = dir.file("hand.pickle", memcomm::test::build_snapshot());
  Run r = run(dir, snap.string() + " --policy recorded,pytorch --json -");
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto list = memcomm::test::parse_json(r.out);  // throws if the table leaked into stdout
  REQUIRE(list.is_array());
  REQUIRE(list.size() == 2 * 2);  // 2 devices x 2 policies
  CHECK(r.err.find("reserv MiB") != std::string::npos);
  CHECK(r.err.find("pytorch") != std::string::npos);
  // A PyTorch snapshot records no rank: the JSON says null, the table has no rank column, and
  // `recorded` is PyTorch's allocator.
  for (const auto& o : list) {
    CHECK(o.contains("rank"));
    CHECK(o["rank"].is_null());
    CHECK(o["format"] == "pytorch-snapshot");
  }
  CHECK(list[0]["device"] == 0);
  CHECK(list[2]["device"] == 2);
  CHECK(r.err.find(" rank ") == std::string::npos);
  CHECK(r.err.find("recorded (PyTorch snapshots) = what PyTorch's allocator did") != std::string::npos);
  CHECK(r.err.find(".mct") == std::string::npos);
}

TEST_CASE("cli: an empty file is named as such (exit 2) and an unwritable --json, or one that is an input, is refused before any work (exit 2)", "[cli][bad]") {
  TempDir dir;
  auto empty = dir.file("empty.pickle", {});
  Run r = run(dir, empty.string());
  CHECK(r.code == 2);
  CHECK(r.err.find("empty.pickle: empty file (0 bytes)") != std::string::npos);

  auto snap = dir.file("hand.pickle", memcomm::test::build_snapshot());
  r = run(dir, snap.string() + " --policy pytorch --json " + (dir.path() / "no-such-dir" / "out.json").string());
  CHECK(r.code == 2);
  CHECK(r.err.find("cannot write") != std::string::npos);
  r = run(dir, snap.string() + " --policy pytorch --json " + (dir.path() / (std::string(300, 'x') + ".json")).string());
  CHECK(r.code == 2);  // was 1, after the replay: "File name too long"
  CHECK(r.err.find("the file name is 305 bytes long") != std::string::npos);

  // See Note [Outputs that would destroy data]: --json naming an input (by any name) would replace the trace.
  std::filesystem::create_symlink(snap, dir.path() / "link.pickle");
  for (const std::string& out : {snap.string(), (dir.path() / "link.pickle").string()}) {
    r = run(dir, snap.string() + " --policy pytorch --json " + out);
    CHECK(r.code == 2);
    CHECK(r.err.find("is also an input") != std::string::npos);
  }
  CHECK(memcomm::test::build_snapshot().size() == std::filesystem::file_size(snap));

  r = run(dir, "--help");
  CHECK(r.code == 0);
  CHECK(r.out.find("Exit codes") != std::string::npos);
  CHECK(r.out.find("table goes to stderr") != std::string::npos);
}

TEST_CASE("cli: a snapshot with no block and no event says there is nothing to replay (exit 0)", "[cli]") {
  TempDir dir;
  memcomm::test::PickleBuilder b;
  b.proto(4).empty_dict().mark();
  b.str("segments").empty_list();
  b.str("device_traces").empty_list().mark().empty_list().appends();
  b.setitems().stop();
  auto snap = dir.file("nothing.pickle", b.bytes());
  Run r = run(dir, snap.string());
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.find("nothing.pickle: nothing to replay: no device holds a block or an allocator event") != std::string::npos);
}

TEST_CASE("cli: a file name that is not UTF-8 is in the JSON as U+FFFD, not an abort", "[cli][json]") {
  TempDir dir;
  auto snap = dir.file("latin1-\xe9t\xe9.pickle", memcomm::test::build_snapshot());  // "été" in Latin-1
  Run r = run(dir, snap.string() + " --policy pytorch --json -");
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto list = memcomm::test::parse_json(r.out);
  REQUIRE(list.size() == 2);
  CHECK(list[0]["file"].get<std::string>().find("latin1-\xef\xbf\xbdt\xef\xbf\xbd.pickle") != std::string::npos);
}

TEST_CASE("cli: a device or a FIFO is refused before it is opened (exit 2)", "[cli][bad]") {
  // See Note [Inputs are regular files]: /dev/zero was read into memory without end, and a FIFO with no
  // writer blocked open() for ever.
  TempDir dir;
  const std::string fifo = (dir.path() / "trace.pickle").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& input : {std::string("/dev/zero"), fifo}) {
    Run r = run(dir, input);
    CHECK(r.code == 2);
    CHECK(r.err.find(input + ": not a regular file") != std::string::npos);
  }
  Run r = run(dir, dir.path().string());
  CHECK(r.code == 2);
  CHECK(r.err.find("is a folder, not a file") != std::string::npos);
}

TEST_CASE("cli: call_bound is the ideal call bound at 1.03 of each device, in the JSON and the table", "[cli][json]") {
  TempDir dir;
  const std::string trace = memcomm::test::source_dir() + "/tests/allocator/data/trainer_mlp_accum2.rank1.mct";
  auto snap = dir.file("hand.pickle", memcomm::test::build_snapshot());
  Run r = run(dir, trace + " " + snap.string() + " --policy recorded,pytorch,memcomm --json -");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto list = memcomm::test::parse_json(r.out);
  std::map<std::pair<std::string, int>, std::uint64_t> bound;  // (file, device) -> ideal_calls at 1.03
  for (const std::string& f : {trace, snap.string()})
    for (const auto& d : rp::load_trace(f).devices) bound[{f, d.device}] = rp::ideal_calls(d, rp::kCallBoundRatio);
  REQUIRE(list.size() == 3 * bound.size());
  for (const auto& o : list) {
    INFO(o.dump());
    REQUIRE(o.contains("call_bound"));
    CHECK(o["call_bound"].get<std::uint64_t>() == bound.at({o["file"].get<std::string>(), o["device"].get<int>()}));
  }
  CHECK(bound.at({trace, memcomm::prof::kHostDevice}) > 0);
  // The table has the column and says what it is.
  CHECK(r.err.find(" bound ") != std::string::npos);
  CHECK(r.err.find("bound = the fewest source calls") != std::string::npos);
  r = run(dir, "--help");
  CHECK(r.out.find("call_bound (the ideal online call bound at 1.03") != std::string::npos);
}

#ifdef MEMCOMM_TEST_BENCH_CALL_BOUND
TEST_CASE("bench_call_bound: --ratio R gives the bound at any R above 1, anything else exits 2", "[cli][bench]") {
  TempDir dir;
  const std::string trace = memcomm::test::source_dir() + "/tests/allocator/data/trainer_mlp_accum2.rank1.mct";
  const auto devices = rp::load_trace(trace).devices;
  REQUIRE(devices.size() == 1);
  auto bench = [&](const std::string& args) { return memcomm::test::run_tool(dir, "bench_call_bound", args); };
  // The default columns stay.
  Run r = bench(trace);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("| R = 1.03 | 1.05 | 1.10 | 1.25 |") != std::string::npos);
  CHECK(r.out.find("| " + std::to_string(rp::ideal_calls(devices[0], 1.03)) + " | ") != std::string::npos);
  // One column per --ratio, in the order given, each the bound at that ratio.
  r = bench("--ratio 1.5 --ratio=1.0125 " + trace);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("| R = 1.50 | 1.0125 |") != std::string::npos);
  CHECK(r.out.find("| " + std::to_string(rp::ideal_calls(devices[0], 1.5)) + " | " +
                   std::to_string(rp::ideal_calls(devices[0], 1.0125)) + " |") != std::string::npos);
  for (const char* bad : {"1", "0.5", "-2", "abc", "1.5x", "inf", "nan", "''"}) {
    INFO(bad);
    r = bench(std::string("--ratio ") + bad + " " + trace);
    CHECK(r.code == 2);
    CHECK(r.err.find("a ratio must be a number above 1") != std::string::npos);
  }
  r = bench(trace + " --ratio");
  CHECK(r.code == 2);
  CHECK(r.err.find("--ratio needs a value") != std::string::npos);
  r = bench("--help");
  CHECK(r.code == 0);
  CHECK(r.out.find("--ratio R") != std::string::npos);
  if (std::filesystem::exists("/dev/full")) {  // Note [Output that was not written]: it exited 0, its table lost
    const std::string err = (dir.path() / "full.err").string();
    const int status = std::system((memcomm::test::bin_dir() + "/bench_call_bound " + trace + " >/dev/full 2>" + err).c_str());
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 1));
    CHECK(memcomm::test::slurp(err).find("bench_call_bound: standard output could not be written") != std::string::npos);
  }
}
#endif

TEST_CASE("synthetic snapshots: every family loads and replays cleanly under every policy", "[cli][synthetic]") {
  // bench/replay/synthetic_snapshots.py writes the workloads the allocator targets are checked on
  // beside the shared snapshots (bench/results/allocator-cpu.md); they must stay readable.
  TempDir dir("synthetic");
  const std::string script = memcomm::test::source_dir() + "/bench/replay/synthetic_snapshots.py";
  const std::string out = (dir.path() / "traces").string();
  const std::string gen = "python3 " + script + " " + out + " --seeds 1 --first-seed 7";
  const std::string gen_log = (dir.path() / "gen.log").string();
  REQUIRE(std::system((gen + " 2>" + gen_log).c_str()) == 0);
  {
    // Each decode trace reports its largest layer cache as a share of peak live (the grouping of
    // bench/results/allocator-cpu.md's decode table): a share, so strictly between 0 and 100 %.
    const std::string log = slurp(gen_log);
    INFO(log);
    const std::string key = "decode-7.pickle: ";
    const auto line = log.find(key);
    REQUIRE(line != std::string::npos);
    const auto share = log.find("largest KV cache ", line);
    REQUIRE(share != std::string::npos);
    const double pct = std::stod(log.substr(share + std::string("largest KV cache ").size()));
    CHECK(pct > 0.0);
    CHECK(pct < 100.0);
    CHECK(log.find("% of peak live", share) != std::string::npos);
  }
  const std::vector<std::string> families = {"transformer", "cnn", "decode"};
  std::string files;
  for (const std::string& f : families) files += " " + out + "/" + f + "-7.pickle";
  Run r = run(dir, "--check --policy pytorch,pytorch-expandable,memcomm --json -" + files);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto list = memcomm::test::parse_json(r.out);
  REQUIRE(list.size() == 3 * families.size());
  for (const auto& o : list) {
    INFO(o.dump());
    CHECK(o["peak_live"].get<double>() > 0);
    CHECK(o["reserved_over_live"].get<double>() >= 1.0);
    CHECK(o["ooms"].get<int>() == 0);
  }
  // The same seed writes the same trace.
  REQUIRE(std::system(("python3 " + script + " " + out + "/b --seeds 1 --first-seed 7 --families cnn 2>/dev/null").c_str()) == 0);
  CHECK(slurp(out + "/b/cnn-7.pickle") == slurp(out + "/cnn-7.pickle"));
  // A family it does not know is a usage error.
  CHECK(WEXITSTATUS(std::system(("python3 " + script + " " + out + " --families mlp 2>/dev/null").c_str())) == 2);
  // bench/replay/allocator_targets.py judges such a folder; --compare adds every policy side by side.
  const std::string targets = memcomm::test::source_dir() + "/bench/replay/allocator_targets.py";
  const std::string table = (dir.path() / "targets.txt").string();
  const int code = WEXITSTATUS(std::system(
      ("python3 " + targets + " --build " + memcomm::test::bin_dir() + "/.. --compare " + out + " >" + table + " 2>&1").c_str()));
  const std::string text = slurp(table);
  INFO(text);
  CHECK((code == 0 || code == 1));  // 1: a trace misses a target, which is a finding, not a failure
  CHECK(text.find("recorded  pytorch  pytorch-expandable  memcomm  bound@1.03") != std::string::npos);
  for (const std::string& f : families) {
    const auto at = text.find(f + "-7  0  ");  // its first row is the comparison's
    REQUIRE(at != std::string::npos);
    const std::string row = text.substr(at, text.find('\n', at) - at);
    CHECK(row.find("  -  ") != std::string::npos);  // a synthetic trace has no recorded segments
  }
  CHECK(text.find("mean reduction vs pytorch over both halves") != std::string::npos);
  // A folder that does not exist is a usage error.
  CHECK(WEXITSTATUS(std::system(("python3 " + targets + " --build " + memcomm::test::bin_dir() + "/.. " + out +
                                 "/none >/dev/null 2>&1").c_str())) == 2);
}
