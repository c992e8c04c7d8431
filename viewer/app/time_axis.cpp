#include "views.hpp"

#include <algorithm>
#include <cmath>

namespace memcomm::view {

void handle_time_input(AppState& st, const TimeAxis& axis, ImVec2 min, ImVec2 max, bool hovered) {
  ImGuiIO& io = ImGui::GetIO();
  const ImVec2 m = io.MousePos;
  const bool inside = hovered && m.x >= min.x && m.x < max.x && m.y >= min.y && m.y < max.y;
  if (inside) {
    st.cursor_valid = true;
    st.cursor = axis.t(m.x);
    if (io.MouseWheel != 0) st.zoom_at(st.cursor, std::pow(0.8, static_cast<double>(io.MouseWheel)));
    const bool select_button = ImGui::IsMouseClicked(1) || (ImGui::IsMouseClicked(0) && io.KeyShift);
    if (select_button) {
      st.selecting = true;
      st.sel_t0 = st.sel_t1 = st.cursor;
    }
  }
  if (st.selecting) {
    st.sel_t1 = axis.t(m.x);
    if (!ImGui::IsMouseDown(1) && !ImGui::IsMouseDown(0)) {
      st.selecting = false;
      if (st.sel_t0 > st.sel_t1) std::swap(st.sel_t0, st.sel_t1);
      st.has_selection = st.sel_t1 - st.sel_t0 > 0 && std::fabs(axis.x(st.sel_t1) - axis.x(st.sel_t0)) >= 2;
      if (st.has_selection) st.selection = range_stats(st.tl, st.sel_t0, st.sel_t1);
    }
  } else if (inside && ImGui::IsMouseDragging(0, 1.0f) && !io.KeyShift) {
    st.pan(static_cast<TimeNs>(-io.MouseDelta.x * axis.ns_per_px));
  }
}

void handle_time_keys(AppState& st, float canvas_width) {
  ImGuiIO& io = ImGui::GetIO();
  if (io.WantTextInput) return;
  const double dt = std::clamp(static_cast<double>(io.DeltaTime), 1.0 / 240, 0.1);
  const TimeNs width = st.view_t1 - st.view_t0, mid = st.view_t0 + width / 2;
  // ImGui 1.86 indexes KeysDown by the backend's key codes (GLFW: 'W' == GLFW_KEY_W).
  if (ImGui::IsKeyDown('W')) st.zoom_at(mid, std::pow(0.1, dt));
  if (ImGui::IsKeyDown('S')) st.zoom_at(mid, std::pow(10.0, dt));
  if (ImGui::IsKeyDown('A')) st.pan(static_cast<TimeNs>(-static_cast<double>(width) * dt));
  if (ImGui::IsKeyDown('D')) st.pan(static_cast<TimeNs>(static_cast<double>(width) * dt));
  (void)canvas_width;
}

void draw_ruler(const AppState& st, const TimeAxis& axis, ImDrawList* dl, float y, float h) {
  dl->AddRectFilled(ImVec2(axis.x0, y), ImVec2(axis.x1, y + h), IM_COL32(30, 30, 36, 255));
  const double min_ns = axis.ns_per_px * 90;  // ticks at least 90 px apart
  double step = std::pow(10.0, std::floor(std::log10(std::max(min_ns, 1.0))));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (step * f >= min_ns) {
      step *= f;
      break;
    }
  const TimeNs base = st.tl.time_zero();
  const double first = std::ceil(static_cast<double>(axis.t0 - base) / step) * step;
  for (double rel = first; base + rel <= static_cast<double>(axis.t1); rel += step) {
    const float x = axis.x(base + static_cast<TimeNs>(rel));
    dl->AddLine(ImVec2(x, y + h - 6), ImVec2(x, y + h), IM_COL32(200, 200, 200, 255));
    const std::string label = format_time(static_cast<TimeNs>(rel));
    if (x + 3 + ImGui::CalcTextSize(label.c_str()).x > axis.x1) continue;  // a label the edge would cut: the tick alone
    dl->AddText(ImVec2(x + 3, y + 2), IM_COL32(200, 200, 200, 255), label.c_str());
  }
}

void draw_overlays(const AppState& st, const TimeAxis& axis, ImDrawList* dl, float y0, float y1) {
  if (st.selecting || st.has_selection) {
    const float a = std::max(axis.x0, axis.x(std::min(st.sel_t0, st.sel_t1)));
    const float b = std::min(axis.x1, axis.x(std::max(st.sel_t0, st.sel_t1)));
    if (b > a) {
      dl->AddRectFilled(ImVec2(a, y0), ImVec2(b, y1), IM_COL32(255, 255, 255, 40));
      dl->AddRect(ImVec2(a, y0), ImVec2(b, y1), IM_COL32(255, 255, 255, 140));
    }
  }
  if (st.pinned_alloc >= 0) {  // the pinned allocation's lifetime, in every time pane
    const float a = std::max(axis.x0, axis.x(st.pinned_t0)), b = std::min(axis.x1, axis.x(std::min(st.pinned_t1, axis.t1)));
    if (b >= a) dl->AddRect(ImVec2(a, y0), ImVec2(std::max(a + 1, b), y1), IM_COL32(255, 220, 60, 200), 0, 0, 2);
  }
  if (st.cursor_valid) {
    const float x = axis.x(st.cursor);
    if (x >= axis.x0 && x < axis.x1) dl->AddLine(ImVec2(x, y0), ImVec2(x, y1), IM_COL32(255, 255, 255, 90));
  }
}

}  // namespace memcomm::view
