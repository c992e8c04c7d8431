// Holds memcomm-view --report-json's "analysis" (the figures its step table and summary show) to
// memcomm-trace report --json over the same traces (Note [One analysis engine] in
// memcomm/trace/analysis.hpp): every step's numbers, times, comm, exposed comm, overlap, data
// wait and peak; every matched collective's time, algbw, busbw, skew and communicator size; the
// mean busbw, the maximum skew, the peaks per rank and over ranks, the straggler counts.
// Integers (ns, bytes) must be equal; ratios (GB/s, %) equal to rounding.
#pragma once

#include "json_text.hpp"
#include "memcomm_test.hpp"

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <tuple>

namespace memcomm::test {

// Runs `cmd` and returns its exit code; its stdout, and its stderr with `with_stderr`, into `out`.
inline int run_capture(const std::string& cmd, std::string& out, bool with_stderr = true) {
  FILE* p = ::popen((cmd + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (p == nullptr) return -1;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// A figure both sides give, or both leave unknown (null: a bandwidth without a size).
inline void same_figure(const nlohmann::json& view, const nlohmann::json& report) {
  REQUIRE(view.is_null() == report.is_null());
  if (!view.is_null()) CHECK(view.get<double>() == Approx(report.get<double>()));
}

inline void check_report_parity(const nlohmann::json& view, const nlohmann::json& report) {
  const auto& vs = view.at("steps");
  const auto& rs = report.at("steps");
  REQUIRE(vs.size() == rs.size());
  for (std::size_t k = 0; k < vs.size(); ++k) {
    const auto& v = vs[k];
    const auto& r = rs[k];
    INFO("step row " << k << ": viewer " << v.dump() << "\nreport " << r.dump());
    CHECK(v.at("rank") == r.at("rank"));
    CHECK(v.at("step") == r.at("step"));
    CHECK(v.at("begin_ns") == r.at("begin_ns"));
    CHECK(v.at("end_ns") == r.at("end_ns"));
    CHECK(v.at("time_ns") == r.at("time_ns"));
    CHECK(v.at("data_wait_ns") == r.at("data_wait_ns"));
    CHECK(v.at("comm_total_ns") == r.at("breakdown").at("comm_total_ns"));
    CHECK(v.at("exposed_comm_ns") == r.at("breakdown").at("exposed_comm_ns"));
    CHECK(v.at("overlap_pct").get<double>() == Approx(r.at("breakdown").at("overlap_pct").get<double>()).margin(1e-9));
    CHECK(v.at("peak_allocated").get<double>() == r.at("peak_allocated").get<double>());
  }
  // Collectives: rows are matched by (communicator key, seq, op's bytes, time); each viewer row
  // must find exactly its report row.
  const auto& vc = view.at("collectives");
  const auto& rc = report.at("collectives");
  REQUIRE(vc.size() == rc.size());
  using Key = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::int64_t>;
  const auto key = [](const nlohmann::json& c) {
    return Key{c.at("comm").get<std::uint64_t>(), c.at("seq").get<std::uint64_t>(), c.at("bytes").get<std::uint64_t>(),
               c.at("time_ns").get<std::int64_t>()};
  };
  std::multimap<Key, const nlohmann::json*> by_key;
  for (const auto& c : rc) by_key.emplace(key(c), &c);
  for (const auto& v : vc) {
    INFO("collective " << v.dump());
    const auto it = by_key.find(key(v));
    REQUIRE(it != by_key.end());
    const nlohmann::json& r = *it->second;
    by_key.erase(it);
    CHECK(v.at("op") == r.at("op"));
    CHECK(v.at("nranks") == r.at("nranks"));
    CHECK(v.at("skew_ns") == r.at("skew_ns"));
    same_figure(v.at("algbw_gbps"), r.at("algbw_gbps"));
    same_figure(v.at("busbw_gbps"), r.at("busbw_gbps"));
  }
  const auto& s = view.at("summary");
  const auto& rsum = report.at("summary");
  same_figure(s.at("mean_busbw_gbps"), rsum.at("mean_busbw_gbps"));
  CHECK(s.at("max_skew_ns") == rsum.at("max_skew_ns"));
  double peak_allocated = 0, peak_reserved = 0;
  REQUIRE(view.at("ranks").size() == report.at("ranks").size());
  for (std::size_t k = 0; k < report.at("ranks").size(); ++k) {
    const auto& r = report.at("ranks")[k];
    const auto& v = view.at("ranks")[k];
    INFO("rank " << r.at("rank"));
    CHECK(v.at("rank") == r.at("rank"));
    CHECK(v.at("peak_allocated").get<double>() == r.at("peak_allocated").get<double>());
    CHECK(v.at("peak_reserved").get<double>() == r.at("peak_reserved").get<double>());
    peak_allocated = std::max(peak_allocated, r.at("peak_allocated").get<double>());
    peak_reserved = std::max(peak_reserved, r.at("peak_reserved").get<double>());
  }
  CHECK(s.at("peak_allocated").get<double>() == peak_allocated);
  CHECK(s.at("peak_reserved").get<double>() == peak_reserved);
  nlohmann::json stragglers = nlohmann::json::object();
  for (const auto& c : rc)  // disagreeing matches stay out of the summary (Note [Collectives the ranks disagree on])
    if (c.at("straggler_rank").get<std::int64_t>() >= 0 && !c.value("ranks_disagree", false)) {
      const std::string r = std::to_string(c.at("straggler_rank").get<std::int64_t>());
      stragglers[r] = stragglers.value(r, 0) + 1;
    }
  CHECK(s.at("stragglers") == stragglers);
}

// Runs memcomm-view (under the display the test has) and memcomm-trace report on `files` and
// compares what they say (check_report_parity). `out` is a folder for the viewer's report.
inline void check_view_matches_report(const std::string& files, const std::string& out) {
  const std::string view_json = out + "/view-report.json";
  std::string vout, rout;
  // --screenshot makes the run headless: it exits after drawing the loaded files (and the advice).
  const int vrc = run_capture(bin_dir() + "/memcomm-view " + files + " --size 640x400 --screenshot " + out +
                                  "/view-report.png --report-json " + view_json,
                              vout);
  INFO("memcomm-view: " << vout);
  REQUIRE(vrc == 0);
  const int rrc = run_capture(bin_dir() + "/memcomm-trace report --json " + files, rout, false);
  REQUIRE(rrc == 0);
  const nlohmann::json view = memcomm::test::read_json(view_json);
  const nlohmann::json report = memcomm::test::parse_json(rout);
  REQUIRE(view.contains("analysis"));
  REQUIRE(report.at("steps").size() > 0);
  check_report_parity(view.at("analysis"), report);
}

}  // namespace memcomm::test
