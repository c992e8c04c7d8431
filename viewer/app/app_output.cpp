// What the app writes out: the frame as pixels or a PNG (--screenshot, script `screenshot`) and
// the --report-json summary of what was received and shown, with the analysis figures the step
// table and the summary show under "analysis", in memcomm-trace report --json's names and units
// (Note [One analysis engine] in the profiler's analysis.hpp; test_report_parity compares them).
#include <memcomm/view/app/app.hpp>

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>
#include <GL/gl.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <stb/stb_image_write.h>

#include <memcomm/common/json_output.hpp>
#include <memcomm/common/replacing_file.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <string>

namespace memcomm::view {

bool App::read_pixels(std::vector<std::uint8_t>& rgba, int& w, int& h) {
  ImDrawData* dd = ImGui::GetDrawData();
  if (window_ == nullptr || dd == nullptr) return false;
  // Re-render the last frame into the back buffer and read it (the front buffer of a hidden
  // window is not readable everywhere).
  glfwGetFramebufferSize(window_, &w, &h);
  glViewport(0, 0, w, h);
  glClearColor(0.08f, 0.08f, 0.10f, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(dd);
  glFinish();
  std::vector<std::uint8_t> bottom_up(static_cast<std::size_t>(w) * h * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, bottom_up.data());
  rgba.resize(bottom_up.size());
  const std::size_t row = static_cast<std::size_t>(w) * 4;
  for (int y = 0; y < h; ++y)
    std::copy_n(&bottom_up[static_cast<std::size_t>(h - 1 - y) * row], row, &rgba[static_cast<std::size_t>(y) * row]);
  return glGetError() == GL_NO_ERROR;
}

bool App::write_png(const std::string& path, std::string& error) {
  std::vector<std::uint8_t> px;
  int w = 0, h = 0;
  if (!read_pixels(px, w, h)) {
    error = path + ": could not read the frame back (glReadPixels failed)";
    return false;
  }
  // Encoded in memory, then replaced whole (Note [Outputs replaced whole]): stb's own file writer
  // ignores write errors, so a full disk gave a 0-byte PNG and exit 0.
  std::string png;
  const auto append = [](void* out, void* data, int n) {
    static_cast<std::string*>(out)->append(static_cast<const char*>(data), static_cast<std::size_t>(n));
  };
  if (!stbi_write_png_to_func(append, &png, w, h, 4, px.data(), w * 4)) {
    error = path + ": cannot encode the frame as PNG";
    return false;
  }
  try {
    write_replacing(path, png);
  } catch (const OutputError& e) {
    error = e.what();
    return false;
  }
  return true;
}

bool App::write_report(const std::string& text) const {
  try {
    write_replacing(opt_.report_json, text + "\n");  // Note [Outputs replaced whole]
    return true;
  } catch (const OutputError& e) {
    std::fprintf(stderr, "memcomm-view: %s: cannot write the report (%s)\n", opt_.report_json.c_str(), e.what());
    return false;
  }
}

namespace {

// The figures the step table and the summary pane show, named as memcomm-trace report --json names them.
nlohmann::json analysis_json(const AppState& st) {
  nlohmann::json steps = nlohmann::json::array();
  for (const StepRow& r : st.steps)
    steps.push_back({{"rank", r.rank}, {"step", r.step}, {"begin_ns", r.start}, {"end_ns", r.end},
                     {"time_ns", r.end - r.start}, {"data_wait_ns", r.data_wait}, {"comm_total_ns", r.comm},
                     {"exposed_comm_ns", r.exposed_comm}, {"overlap_pct", r.overlap_pct},
                     {"peak_allocated", r.peak_allocated}});
  nlohmann::json collectives = nlohmann::json::array();
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& rd : st.tl.ranks) {
    for (const auto& c : rd.collectives)
      if (c.first_in_group)  // one row per matched collective, as the report's
        collectives.push_back({{"comm", c.comm_key}, {"seq", c.seq}, {"op", st.tl.strings.get(c.op)}, {"bytes", c.bytes},
                               {"nranks", c.group_size}, {"time_ns", c.time},
                               {"algbw_gbps", number_or_null(c.algbw, c.bytes > 0)},
                               {"busbw_gbps", number_or_null(c.busbw, c.bytes > 0)}, {"skew_ns", c.skew},
                               {"ranks_disagree", c.ranks_disagree}});
    const CounterSeries* a = rd.counter("allocated");
    const CounterSeries* r = rd.counter("reserved");
    ranks.push_back({{"rank", rd.rank}, {"peak_allocated", a ? a->global_max() : 0.0}, {"peak_reserved", r ? r->global_max() : 0.0}});
  }
  const Summary& s = st.summary;
  nlohmann::json stragglers = nlohmann::json::object();
  for (const auto& [rank, times] : s.stragglers) stragglers[std::to_string(rank)] = times;
  return {{"steps", steps},
          {"collectives", collectives},
          {"ranks", ranks},
          {"summary", {{"mean_busbw_gbps", number_or_null(s.mean_busbw, s.busbw_known)}, {"max_skew_ns", s.max_skew}, {"peak_allocated", s.peak_allocated},
                       {"peak_reserved", s.peak_reserved}, {"stragglers", stragglers},
                       {"disagreeing_collectives", s.disagreeing}}}};
}

nlohmann::json holders_json(const HoldersAt& h) {
  nlohmann::json sites = nlohmann::json::array();
  for (const auto& s : h.sites) sites.push_back({{"bytes", s.bytes}, {"count", s.count}, {"stack", s.stack}});
  return {{"at_ns", h.at_ns}, {"live_bytes", h.live_bytes}, {"sites", sites}};
}

// The "who holds memory" figures of the memory rank at the allocator time and at the peak, by the
// pane's own functions (holders_at, peak_live), and the last hovered allocation's tooltip fields.
void allocations_json(const AppState& st, nlohmann::json& j) {
  if (st.tl.ranks.empty()) return;
  const RankData& rd = st.tl.ranks[static_cast<std::size_t>(st.memory_rank)];
  const prof::LivePeak peak = prof::peak_live(rd.allocations);
  j["memory_at"] = {{"rank", rd.rank}, {"allocations", rd.allocations.list.size()}, {"stacks", rd.stacks != nullptr},
                    {"cursor", holders_json(holders_at(rd, st.alloc_time))}, {"peak", holders_json(holders_at(rd, peak.t))}};
  if (!st.has_hovered_alloc) return;
  const AllocationTip& t = st.hovered_alloc;
  j["allocation"] = {{"size", t.size}, {"addr", t.addr}, {"stream", t.stream}, {"category", t.category},
                     {"alloc_ns", t.alloc_ns}, {"free_ns", t.free_ns}, {"before_trace", t.before_trace}, {"stack_of_free", t.stack_of_free}, {"stack", t.stack},
                     {"pinned", st.pinned_alloc}};
}

}  // namespace

std::string App::report_json() const {
  nlohmann::json j;
  j["frames"] = frames_;
  j["events"] = st_.tl.event_count;
  // Live: every event received, the count --exit-after-events waits on; metadata and samples are
  // received but are no timeline events, so "events" can be lower.
  j["events_received"] = events_seen();
  j["sources"] = st_.tl.sources;
  j["messages"] = st_.messages;
  j["tooltip"] = st_.tooltips_seen.empty() ? std::string() : st_.tooltips_seen.back();
  j["tooltips"] = st_.tooltips_seen;
  j["view"] = {{"t0", st_.view_t0}, {"t1", st_.view_t1}, {"begin", st_.tl.begin}, {"end", st_.tl.end}};
  std::uint64_t drops = 0;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& rd : st_.tl.ranks) {
    std::uint64_t spans = 0;
    for (const auto& l : rd.lanes) spans += l.span_count();
    drops += rd.dropped;
    ranks.push_back({{"rank", rd.rank}, {"spans", spans}, {"collectives", rd.collectives.size()},
                     {"alloc_events", rd.alloc_events.size()}, {"dropped", rd.dropped}, {"connected", rd.connected},
                     {"stream_ended", rd.stream_ended}});
  }
  j["ranks"] = ranks;
  j["drops"] = drops;
  j["steps"] = st_.steps.size();
  j["analysis"] = analysis_json(st_);
  allocations_json(st_, j);
  j["allocator"] = {{"reserved", st_.alloc_status.reserved},
                    {"virtual_reserved", st_.alloc_status.virtual_reserved},
                    {"allocated", st_.alloc_status.allocated}};
  if (st_.has_selection)
    j["selection"] = {{"t0", st_.selection.t0}, {"t1", st_.selection.t1}, {"spans", st_.selection.spans},
                      {"collectives", st_.selection.collectives}};
  nlohmann::json advice = nlohmann::json::array();
  for (const auto& a : st_.advice.advice)
    advice.push_back({{"topic", a.topic}, {"change", a.change}, {"evidence", a.evidence}, {"saving", a.saving},
                      {"saving_unit", a.saving_unit}, {"saving_text", a.saving_text}});
  j["advice"] = {{"state", advice_state_name(st_.advice.state)}, {"files", st_.advice.files}, {"items", advice},
                 {"error", st_.advice.error}, {"report", st_.advice.report}};
  std::uint32_t tune_rank = 0;
  nlohmann::json tune = nlohmann::json::array();
  for (const auto& p : tune_probes(st_.tl, tune_rank))  // O(probes), once at exit
    tune.push_back({{"micro_batch", p.micro_batch}, {"oom", p.oom}, {"peak_reserved", p.peak_reserved}, {"step_ms", p.step_ms}});
  j["tuner"] = {{"rank", tune_rank}, {"probes", tune}};
  j["status"] = st_.status_line;
  j["live"] = st_.live_status;
  if (live_) {
    const LiveStats ls = live_->stats();
    j["live_stats"] = {{"port", ls.port}, {"connections", ls.connections}, {"active", ls.active},
                       {"received", live_->events_received()}, {"queue_dropped", ls.dropped}, {"errors", ls.errors}};
  }
  return json_text(j, 2);
}

}  // namespace memcomm::view
