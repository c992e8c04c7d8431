// `memcomm-trace report --hta --json` on every trace set in ../shared/traces/kineto against the
// figures HolisticTraceAnalysis 0.5.0 gave for it (hta-reference.json): idle, compute and
// non-compute % and the comm/comp overlap % (null where HTA has none) within 0.1 percentage point,
// for HTA's default and include_last_profiler_step=True, and memcomm's whole-trace variant against
// the reference's whole_trace_reimpl (Note [HTA's figures] in memcomm/trace/hta.hpp). Sets are
// read from the reference, so a data folder with more sets is checked whole; missing data skips.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "json_text.hpp"
#include "memcomm_test.hpp"
#include "report_parity.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr double kTolerancePct = 0.1;

fs::path kineto_dir() { return fs::path(memcomm::test::source_dir()) / ".." / "shared" / "traces" / "kineto"; }

struct Variant {
  const char* reference;  // the set's key in hta-reference.json
  const char* flags;      // memcomm-trace report flags
  const char* object;     // the rank's object in the report
};

// The reference's figures for one rank: {idle, compute, non-compute, overlap} with null overlap.
std::vector<json> expected(const json& set, const Variant& v, int64_t rank) {
  if (std::string(v.object) == "hta_whole_trace") {
    for (const json& r : set.at("whole_trace_reimpl"))
      if (r.at("rank") == rank)
        return {r.at("idle_time_pctg"), r.at("compute_time_pctg"), r.at("non_compute_time_pctg"),
                r.at("comp_comm_overlap_pctg")};
  } else {
    json out;
    for (const json& r : set.at(v.reference).at("temporal_breakdown"))
      if (r.at("rank") == rank)
        out = {r.at("idle_time_pctg"), r.at("compute_time_pctg"), r.at("non_compute_time_pctg")};
    for (const json& r : set.at(v.reference).at("comm_comp_overlap"))
      if (r.at("rank") == rank && out.size() == 3) return {out[0], out[1], out[2], r.at("comp_comm_overlap_pctg")};
  }
  return {};
}

bool close(const json& got, const json& want) {
  if (want.is_null() || got.is_null()) return want.is_null() && got.is_null();
  return std::abs(got.get<double>() - want.get<double>()) <= kTolerancePct;
}

// Mismatches of one set under one variant, as lines for the failure message.
std::vector<std::string> compare_set(const std::string& name, const json& set, const std::vector<std::string>& files,
                                     const Variant& v) {
  std::string cmd = memcomm::test::bin_dir() + "/memcomm-trace report --hta --json " + v.flags;
  for (const std::string& f : files) cmd += " '" + f + "'";
  std::string out;
  if (memcomm::test::run_capture(cmd, out, false) != 0) return {name + ": memcomm-trace failed: " + cmd};
  const json report = memcomm::test::parse_json(out);
  std::vector<std::string> bad;
  const char* keys[] = {"idle_pct", "compute_pct", "non_compute_pct", "comm_comp_overlap_pct"};
  size_t ranks = 0;
  for (const json& r : report.at("ranks")) {
    const std::vector<json> want = expected(set, v, r.at("rank").get<int64_t>());
    if (want.empty()) continue;
    ++ranks;
    for (size_t k = 0; k < 4; ++k)
      if (!close(r.at(v.object).at(keys[k]), want[k]))
        bad.push_back(name + " rank " + r.at("rank").dump() + " " + v.object + "." + keys[k] + ": " +
                      r.at(v.object).at(keys[k]).dump() + ", reference " + want[k].dump());
  }
  if (ranks == 0) bad.push_back(name + ": no rank of the report is in the reference");
  return bad;
}

void check_every_set(const Variant& v) {
  const fs::path ref_path = kineto_dir() / "hta-reference.json";
  if (!fs::exists(ref_path)) MEMCOMM_SKIP_TEST("no HTA reference at " + ref_path.string());
  const json ref = memcomm::test::read_json(ref_path.string());
  std::vector<std::string> bad, missing;
  for (const auto& [name, set] : ref.at("sets").items()) {
    std::vector<std::string> files;
    for (const auto& [file, unused] : set.at("files").items()) {
      const fs::path p = kineto_dir() / set.at("dir").get<std::string>() / file;
      (fs::exists(p) ? files : missing).push_back(p.string());
    }
    if (files.size() != set.at("files").size()) continue;
    for (std::string& line : compare_set(name, set, files, v)) bad.push_back(std::move(line));
  }
  std::string text;
  for (const std::string& line : bad) text += line + "\n";
  INFO(text);
  CHECK(bad.empty());
  if (bad.empty() && !missing.empty()) MEMCOMM_SKIP_TEST("trace files missing: " + missing.front() + " ...");
}

}  // namespace

TEST_CASE("report --hta equals HTA's default figures on every shared torch.profiler trace", "[trace][hta]") {
  check_every_set({"hta_default", "", "hta"});
}

TEST_CASE("report --hta --include-last-step equals HTA's include_last_profiler_step figures", "[trace][hta]") {
  check_every_set({"hta_include_last_profiler_step", "--include-last-step", "hta"});
}

TEST_CASE("report --hta's whole-trace variant equals the reference's whole-trace figures", "[trace][hta]") {
  check_every_set({"whole_trace_reimpl", "", "hta_whole_trace"});
}
