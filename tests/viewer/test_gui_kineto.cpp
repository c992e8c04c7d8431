// memcomm-view on torch.profiler (Kineto) traces: the real 2-rank pair's NCCL collectives matched
// across ranks in --report-json (whose analysis must be memcomm-trace report --json's, as for .mct
// traces) and in a screenshot (kineto_pair.png under the tests' output); File > Open and a drop of
// Kineto files; and what a bad one shows: its message in the window and on stderr.
#include "gui_fixture.hpp"
#include "json_text.hpp"
#include "kineto_traces.hpp"
#include "report_parity.hpp"

#include <memcomm/view/app/input_script.hpp>
#include <memcomm/view/loader.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace gui_test;
using namespace memcomm::view;
namespace pal = memcomm::view::palette;

namespace {

const char* const kPairFiles[] = {"sampled_pair/sampled_rank-0.json.gz", "sampled_pair/sampled_rank-1.json.gz"};


}  // namespace

TEST_CASE("memcomm-view on torch.profiler traces reports what memcomm-trace report computes, collectives matched",
          "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  enum Set { kHandWritten, kPair, kMemory };
  const Set set = GENERATE(kHandWritten, kPair, kMemory);
  const std::string out = out_dir() + "/kineto_report" + std::to_string(set);
  std::filesystem::create_directories(out);
  std::string files;
  if (set == kHandWritten) {  // needs nothing beside the checkout
    kineto_traces::write(out + "/rank0.json", kineto_traces::json(0, 1600));
    kineto_traces::write(out + "/rank1.json", kineto_traces::json(1, 1650));
    files = out + "/rank0.json " + out + "/rank1.json";
  } else if (set == kPair) {
    files = kineto_traces::shared(kPairFiles[0]) + " " + kineto_traces::shared(kPairFiles[1]);
  } else {
    files = kineto_traces::shared("df_index_resolver/df_index_resolver.json.gz");
  }
  memcomm::test::check_view_matches_report(files, out);
  const nlohmann::json view = memcomm::test::read_json(out + "/view-report.json");
  INFO(view.at("messages").dump());
  CHECK(view.at("messages").empty());
  if (set == kHandWritten) {  // the [memory] totals: 4 MiB were allocated before the trace began
    for (const auto& r : view.at("analysis").at("ranks")) CHECK(r.at("peak_allocated") == 5.0 * kMiB);
    return;
  }
  if (set != kPair) return;
  // Both ranks' 10 NCCL kernels are collectives, each matched with the other rank's (one row per
  // matched group: 10 rows for 20 collectives), in a communicator of the run's 128 ranks
  // (distributedInfo), and each rank arrived last at some of them.
  REQUIRE(view.at("ranks").size() == 2);
  for (const auto& r : view.at("ranks")) CHECK(r.at("collectives") == 10);
  const auto& colls = view.at("analysis").at("collectives");
  CHECK(colls.size() == 10);
  for (const auto& c : colls) CHECK(c.at("nranks") == 128);
  const auto& stragglers = view.at("analysis").at("summary").at("stragglers");
  CHECK(stragglers.contains("0"));
  CHECK(stragglers.contains("1"));
}

TEST_CASE("screenshot of a torch.profiler 2-rank pair: both ranks' NCCL collectives drawn and linked", "[gui][viewer]") {
  Timeline tl;
  for (const char* rel : kPairFiles) {
    Timeline one;
    std::string error;
    REQUIRE(load_file(kineto_traces::shared(rel), one, error));
    tl.merge(std::move(one));
  }
  REQUIRE(tl.ranks.size() == 2);
  TimeNs lo = INT64_MAX, hi = INT64_MIN;
  for (const auto& rd : tl.ranks)
    for (const auto& c : rd.collectives) {
      lo = std::min(lo, c.start);
      hi = std::max(hi, c.end);
    }
  auto app = make_app(1600, 1200, "timeline");
  AppState& st = app->state();
  st.set_timeline(std::move(tl), false);
  const TimeNs margin = (hi - lo) / 20;
  st.zoom_to(lo - margin, hi + margin);
  frames(*app, 3);
  const Image img = grab(*app, "kineto_pair.png");
  // Every collective of each rank is on its rank's collective row, in the collective colour or, where
  // that rank arrived last, the straggler's; each rank-0 collective is linked to its rank-1 instance.
  int stragglers[2] = {0, 0};
  for (std::size_t slot = 0; slot < 2; ++slot) {
    const float y = row_y(st, static_cast<int>(slot), LaneKind::Collective);
    REQUIRE(y > 0);
    REQUIRE(y < static_cast<float>(img.h));
    const RankData& rd = st.tl.ranks[slot];
    for (const Collective& c : rd.collectives) {
      const int x = static_cast<int>(x_of(st, (c.start + c.end) / 2));
      const pal::Rgb colour = c.straggler ? pal::kStraggler : pal::kCollective;
      INFO("rank " << rd.rank << " seq " << c.seq << " at x " << x);
      CHECK(img.count(x - 1, static_cast<int>(y) - 3, x + 2, static_cast<int>(y) + 3, colour) > 0);
      CHECK(c.next_rank == (slot == 0 ? 1 : -1));
      stragglers[slot] += c.straggler;
    }
  }
  CHECK(stragglers[0] > 0);
  CHECK(stragglers[1] > 0);
  CHECK(st.links_drawn == 10);
}

TEST_CASE("File > Open and a drop load torch.profiler traces, one rank each", "[gui][viewer]") {
  const std::string r0 = out_dir() + "/kineto_open.rank0.json", r1 = out_dir() + "/kineto_drop.rank1.json";
  kineto_traces::write(r0, kineto_traces::json(0, 1600));
  kineto_traces::write(r1, kineto_traces::json(1, 1650));
  auto app = make_app(1000, 600, "");
  frames(*app, 2);
  AppState& st = app->state();
  run_script_and_load(*app, "click " + at(st.file_menu) + "\nframes 2\n");
  REQUIRE(st.open_item.y >= 0);  // the menu is open
  run_script_and_load(*app, "click " + at(st.open_item) + "\nframes 2\ntype " + r0 + "\nkey enter\nframes 2\n");
  run_script_and_load(*app, "drop " + r1 + "\nframes 2\n");
  INFO(nlohmann::json(st.messages).dump());
  CHECK(st.messages.empty());
  CHECK(has_source(st, r0));
  CHECK(has_source(st, r1));
  REQUIRE(st.tl.ranks.size() == 2);
  REQUIRE(st.tl.ranks[0].collectives.size() == 1);
  CHECK(st.tl.ranks[0].collectives[0].next_rank == 1);  // matched across the two files
  CHECK(st.tl.ranks[1].collectives[0].straggler);
}

TEST_CASE("a torch.profiler trace cut short, or JSON that is none, shows its message in the window and on stderr",
          "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const std::string other = out_dir() + "/kineto_not_a_trace.json", cut = out_dir() + "/kineto_cut.json";
  kineto_traces::write(other, R"({"traceEvents_not_here": []})");
  const std::string full = kineto_traces::json(0, 1600);
  kineto_traces::write(cut, full.substr(0, full.find("\"cat\": \"kernel\"")));
  std::string out;
  // JSON that is not a trace: exit 2 (a headless input that cannot be loaded), the message on stderr.
  CHECK(run_viewer(other + " --size 320x200 --screenshot " + out_dir() + "/kineto_bad.png", &out) == 2);
  CHECK(out.find("not a torch.profiler trace") != std::string::npos);
  CHECK(out.find(other) != std::string::npos);
  // A file cut short: what it holds is shown, with a warning that says where it stopped.
  const std::string report = out_dir() + "/kineto_cut.json.report";
  out.clear();
  CHECK(run_viewer(cut + " --size 320x200 --screenshot " + out_dir() + "/kineto_cut.png --report-json " + report, &out) == 0);
  CHECK(out.find("warning: " + cut) != std::string::npos);
  const nlohmann::json j = memcomm::test::read_json(report);
  REQUIRE(j.at("messages").size() == 1);
  CHECK(j.at("messages")[0].get<std::string>().find("ends early") != std::string::npos);
  CHECK(j.at("events").get<std::uint64_t>() > 0);
}
