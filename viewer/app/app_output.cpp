// What the app writes out: the frame as pixels or a PNG (--screenshot, script `screenshot`) and
// the --report-json summary of what was received and shown.
#include <memcomm/view/app/app.hpp>

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>
#include <GL/gl.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <stb/stb_image_write.h>

#include <nlohmann/json.hpp>

#include <algorithm>

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
  if (!stbi_write_png(path.c_str(), w, h, 4, px.data(), w * 4)) {
    error = path + ": cannot write PNG";
    return false;
  }
  return true;
}

std::string App::report_json() const {
  nlohmann::json j;
  j["frames"] = frames_;
  j["events"] = st_.tl.event_count;
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
                     {"alloc_events", rd.alloc_events.size()}, {"dropped", rd.dropped}, {"connected", rd.connected}});
  }
  j["ranks"] = ranks;
  j["drops"] = drops;
  j["steps"] = st_.steps.size();
  j["allocator"] = {{"reserved", st_.alloc_status.reserved},
                    {"virtual_reserved", st_.alloc_status.virtual_reserved},
                    {"allocated", st_.alloc_status.allocated}};
  if (st_.has_selection)
    j["selection"] = {{"t0", st_.selection.t0}, {"t1", st_.selection.t1}, {"spans", st_.selection.spans},
                      {"collectives", st_.selection.collectives}};
  nlohmann::json advice = nlohmann::json::array();
  for (const auto& a : st_.advice.advice)
    advice.push_back({{"topic", a.topic}, {"change", a.change}, {"evidence", a.evidence}, {"saving", a.saving},
                      {"saving_unit", a.saving_unit}});
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
  return j.dump(2);
}

}  // namespace memcomm::view
