// What a run reports about itself: the trace's memory categories and wire types, run-wide figures
// in the summary, cache clearing, and the learning-rate schedule in the log.
#include "trainer_runner.hpp"

#include <memcomm/profiler/sink.hpp>
#include <memcomm/train/options.hpp>
#include <memcomm/trace/trace_reader.hpp>

#include <nlohmann/json.hpp>

using namespace memcomm::test;
namespace prof = memcomm::prof;

namespace {

// Every event of one rank's trace file.
std::vector<prof::Event> read_events(const std::string& path, std::vector<std::string>* strings = nullptr) {
  prof::TraceReader r(path);
  std::vector<prof::Event> out;
  prof::ChunkView c;
  while (r.next(c)) out.insert(out.end(), c.begin(), c.end());
  if (strings) *strings = r.strings();
  return out;
}

}  // namespace

TEST_CASE("a trace labels allocations with what they hold") {
  const auto d = scratch_dir("categories");
  // Two ranks, so gradient buckets and collectives exist; --workers 0 puts batch assembly on the
  // training thread too.
  const auto r = run_command(quick_train("--nproc 2 --steps 3 --workers 0 --trace " + d + "/t.mct"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  std::map<prof::MemCategory, int> allocs;
  for (const auto& e : read_events(prof::rank_trace_path(d + "/t.mct", 0)))
    if (e.kind == prof::EventKind::Alloc) ++allocs[static_cast<prof::MemCategory>(e.as<prof::MemBlockEvent>().category)];
  for (const auto& [cat, n] : allocs) UNSCOPED_INFO(prof::mem_category_name(cat) << ": " << n);
  for (const auto cat : {prof::MemCategory::Parameter, prof::MemCategory::Gradient, prof::MemCategory::Activation,
                         prof::MemCategory::OptimizerState, prof::MemCategory::Input}) {
    INFO(prof::mem_category_name(cat));
    CHECK(allocs[cat] > 0);
  }
}

TEST_CASE("a dataset held in memory is labelled as input") {
  // Fashion-MNIST's training set (45 MiB of a CNN run's 76 MiB peak) was the trace's largest
  // unlabelled holder.
  const std::string data = memcomm::train::TrainOptions{}.data_dir;  // --data-dir's default
  if (!std::filesystem::exists(data + "/train-images-idx3-ubyte.gz")) return;
  const auto d = scratch_dir("dataset-category");
  const auto r = run_command(train_bin() + " --model cnn --steps 2 --threads 1 --eval-batches 1 --trace " + d + "/t.mct");
  INFO(r.output);
  REQUIRE(r.code == 0);
  std::map<prof::MemCategory, uint64_t> bytes;
  for (const auto& e : read_events(prof::rank_trace_path(d + "/t.mct", 0)))
    if (e.kind == prof::EventKind::Alloc) bytes[static_cast<prof::MemCategory>(e.as<prof::MemBlockEvent>().category)] += e.as<prof::MemBlockEvent>().size();
  for (const auto& [cat, n] : bytes) UNSCOPED_INFO(prof::mem_category_name(cat) << ": " << n);
  CHECK(bytes[prof::MemCategory::Input] >= 47'040'000);  // 60,000 images of 28 x 28 bytes
  CHECK(bytes[prof::MemCategory::Unknown] < bytes[prof::MemCategory::Input] / 10);
}

TEST_CASE("compressed gradients are labelled with their wire type in the trace") {
  for (const auto& [wire, dtype] : {std::pair<std::string, prof::DType>{"bf16", prof::DType::BF16},
                                    {"fp16", prof::DType::F16}, {"none", prof::DType::F32}}) {
    const auto d = scratch_dir("wire-" + wire);
    const auto r = run_command(quick_train("--nproc 2 --steps 2 --grad-compression " + wire + " --trace " + d + "/t.mct"));
    INFO(wire << "\n" << r.output);
    REQUIRE(r.code == 0);
    int buckets = 0;
    for (const auto& e : read_events(prof::rank_trace_path(d + "/t.mct", 1))) {
      if (e.kind != prof::EventKind::CollEnd) continue;
      const auto c = e.as<prof::CollectiveEvent>();
      if (c.bucket == prof::kNoBucket) continue;
      ++buckets;
      CHECK(c.dtype == dtype);
    }
    CHECK(buckets == 2);  // one bucket, two steps
  }
}

TEST_CASE("the summary counts every rank's trace events and drops") {
  const auto d = scratch_dir("run-wide");
  const auto r = run_command(quick_train("--nproc 2 --steps 3 --trace " + d + "/t.mct --summary-json " + d + "/s.json"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto s = read_json(d + "/s.json");
  const size_t in_files = read_events(prof::rank_trace_path(d + "/t.mct", 0)).size() +
                          read_events(prof::rank_trace_path(d + "/t.mct", 1)).size();
  CHECK(s["trace_drops"].get<int64_t>() == 0);
  CHECK(s["trace_events"].get<int64_t>() == static_cast<int64_t>(in_files));
  CHECK(s["peak_reserved"].get<int64_t>() >= s["peak_allocated"].get<int64_t>());
  CHECK(s["peak_allocated"].get<int64_t>() > 0);
  // The log line shows the same allocator's peak; the last line names the viewer beside this binary.
  CHECK(r.output.find("peak reserved") != std::string::npos);
  const auto viewer = std::filesystem::canonical(bin_dir()) / "memcomm-view";
  const std::string command = std::filesystem::exists(viewer) ? viewer.string() : std::string("memcomm-view");
  CHECK(r.output.find(command + " " + d + "/t.rank*.mct") != std::string::npos);
}

TEST_CASE("cache clearing (--empty-cache N) gives memory back every N steps and before evaluation and says how much") {
  const auto d = scratch_dir("empty-cache");
  // Batches of 256 rows through a 256-wide MLP need segments of their own, which are free between
  // steps; --workers 0 keeps the allocation order the same from run to run.
  const auto r = run_command(quick_train("--steps 4 --hidden 256 --batch-size 256 --workers 0 --empty-cache 2 --trace " +
                                         d + "/t.mct --summary-json " + d + "/s.json"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto s = read_json(d + "/s.json");
  CHECK(s["cache_clears"].get<int>() == 3);  // after steps 2 and 4, and before evaluation
  CHECK(s["cache_released"].get<int64_t>() > 0);
  CHECK(r.output.find("cache cleared 3 time(s)") != std::string::npos);
  std::vector<std::string> strings;
  const auto events = read_events(prof::rank_trace_path(d + "/t.mct", 0), &strings);
  int counters = 0;
  for (const auto& e : events)
    if (e.kind == prof::EventKind::Counter) {
      const auto c = e.as<prof::CounterEvent>();
      if (c.name < strings.size() && strings[c.name] == "mem.cache_released") ++counters;
    }
  CHECK(counters == 3);
  const auto never = run_command(quick_train("--steps 4 --summary-json " + d + "/never.json"));
  REQUIRE(never.code == 0);
  CHECK(read_json(d + "/never.json")["cache_clears"].get<int>() == 0);
}

TEST_CASE("the log shows the learning rate of the step and cosine schedules") {
  const double lr = 0.1;
  const int steps = 8;
  for (const std::string schedule : {"step", "cosine"}) {
    const auto r = run_command(quick_train("--steps 8 --log-interval 1 --lr 0.1 --schedule " + schedule));
    INFO(schedule << "\n" << r.output);
    REQUIRE(r.code == 0);
    std::regex re(R"(step (\d+)/8 loss \S+ lr (\S+))");
    int seen = 0;
    for (std::sregex_iterator it(r.output.begin(), r.output.end(), re), end; it != end; ++it, ++seen) {
      const int done = std::stoi((*it)[1]);
      const double frac = double(done - 1) / steps;  // the lr of step `done` is set at its start
      const double expect = schedule == "step" ? lr * (frac >= 0.75 ? 0.01 : frac >= 0.5 ? 0.1 : 1.0)
                                               : lr * 0.5 * (1 + std::cos(M_PI * frac));
      INFO("step " << done);
      CHECK(std::stod((*it)[2]) == Approx(expect).epsilon(1e-5));
    }
    CHECK(seen == steps);
  }
}
