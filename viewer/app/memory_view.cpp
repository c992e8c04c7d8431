// Memory over time: allocated (filled), active and reserved (lines), largest free block, OOM
// markers, for one rank. Curves come from CounterSeries::query, O(pixels) at any zoom.
#include <memcomm/view/app/palette.hpp>

#include "views.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace memcomm::view {

void draw_memory(AppState& st, ImVec2 size) {
  ImGui::BeginChild("memory", size, true, ImGuiWindowFlags_NoScrollWithMouse | ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoMove);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 wpos = ImGui::GetWindowPos(), wsize = ImGui::GetWindowSize();
  const float left = wpos.x + st.label_width, right = wpos.x + wsize.x - ImGui::GetStyle().ScrollbarSize;
  const float top = wpos.y + 6, bottom = wpos.y + wsize.y - 6;
  const bool hovered = ImGui::IsWindowHovered();
  const TimeAxis axis(st, left, right);
  handle_time_input(st, axis, ImVec2(left, top), ImVec2(right, bottom), hovered);
  const TimeAxis view(st, left, right);

  ImGui::TextUnformatted("Memory");
  if (!st.tl.ranks.empty()) {
    ImGui::SetNextItemWidth(st.label_width - 16);
    const std::string cur = fmt::format("rank {}", st.tl.ranks[static_cast<std::size_t>(st.memory_rank)].rank);
    if (ImGui::BeginCombo("##memrank", cur.c_str())) {
      for (std::size_t i = 0; i < st.tl.ranks.size(); ++i)
        if (ImGui::Selectable(fmt::format("rank {}", st.tl.ranks[i].rank).c_str(), static_cast<int>(i) == st.memory_rank))
          st.memory_rank = static_cast<int>(i);
      ImGui::EndCombo();
    }
  }
  if (st.tl.ranks.empty()) {
    ImGui::EndChild();
    return;
  }
  const RankData& rd = st.tl.ranks[static_cast<std::size_t>(st.memory_rank)];
  const CounterSeries* allocated = rd.counter("allocated");
  const CounterSeries* reserved = rd.counter("reserved");
  const CounterSeries* active = rd.counter("active");
  const CounterSeries* largest = rd.counter("largest_free");
  const CounterSeries* frag = rd.counter("fragmentation");
  double ymax = 1;
  for (const auto* c : {allocated, reserved, active})
    if (c) ymax = std::max(ymax, c->global_max());
  ymax *= 1.05;
  const int pixels = std::max(1, static_cast<int>(right - left));
  st.time_x0 = left;
  st.time_x1 = right;
  st.mem_y0 = top;
  st.mem_y1 = bottom;
  st.mem_ymax = ymax;
  auto ypix = [&](double v) { return bottom - static_cast<float>(v / ymax) * (bottom - top); };
  static std::vector<PixelMinMax> col;
  dl->PushClipRect(ImVec2(left, top), ImVec2(right, bottom), true);
  dl->AddRectFilled(ImVec2(left, top), ImVec2(right, bottom), IM_COL32(25, 25, 30, 255));
  // Allocated as a filled area; the min..max envelope of each column in full colour down to min,
  // lighter between min and max (what a spike looks like when zoomed out).
  if (allocated) {
    allocated->query(view.t0, view.t1, pixels, col);
    const auto c = palette::kAllocated.imgui();
    const ImU32 light = IM_COL32(palette::kAllocated.r, palette::kAllocated.g, palette::kAllocated.b, 150);
    for (int i = 0; i < pixels; ++i) {
      if (!col[static_cast<std::size_t>(i)].valid) continue;
      const float x = left + static_cast<float>(i);
      dl->AddRectFilled(ImVec2(x, ypix(col[static_cast<std::size_t>(i)].min)), ImVec2(x + 1, bottom), c);
      if (col[static_cast<std::size_t>(i)].max > col[static_cast<std::size_t>(i)].min)
        dl->AddRectFilled(ImVec2(x, ypix(col[static_cast<std::size_t>(i)].max)), ImVec2(x + 1, ypix(col[static_cast<std::size_t>(i)].min)), light);
    }
  }
  auto line = [&](const CounterSeries* s, palette::Rgb rgb, double scale) {
    if (!s) return;
    s->query(view.t0, view.t1, pixels, col);
    for (int i = 0; i < pixels; ++i) {
      const auto& p = col[static_cast<std::size_t>(i)];
      if (!p.valid) continue;
      const float x = left + static_cast<float>(i);
      dl->AddRectFilled(ImVec2(x, ypix(p.max * scale) - 1), ImVec2(x + 1, ypix(p.min * scale) + 1), rgb.imgui());
    }
  };
  line(reserved, palette::kReserved, 1);
  line(active, palette::kActive, 1);
  line(largest, palette::kLargestFree, 1);
  // Categories (parameters, gradients, optimizer state, activations...) where the trace labels blocks.
  std::vector<std::pair<const char*, palette::Rgb>> legend = {
      {"allocated", palette::kAllocated}, {"active", palette::kActive}, {"reserved", palette::kReserved},
      {"largest free", palette::kLargestFree}};
  for (const auto& c : rd.counters) {
    if (c.name().rfind("cat:", 0) != 0) continue;
    for (int k = 0; k < kMemCategoryCount; ++k)
      if (c.name().compare(4, std::string::npos, kMemCategoryNames[k]) == 0) {
        line(&c, palette::kCategory[k], 1);
        legend.emplace_back(kMemCategoryNames[k], palette::kCategory[k]);
      }
  }
  // OOM markers: binary search for the visible ones.
  auto it = std::lower_bound(rd.ooms.begin(), rd.ooms.end(), view.t0);
  for (; it != rd.ooms.end() && *it < view.t1; ++it) {
    const float x = view.x(*it);
    dl->AddLine(ImVec2(x, top), ImVec2(x, bottom), palette::kOom.imgui(), 2);
    dl->AddTriangleFilled(ImVec2(x - 5, top), ImVec2(x + 5, top), ImVec2(x, top + 8), palette::kOom.imgui());
  }
  draw_overlays(st, view, dl, top, bottom);
  dl->PopClipRect();
  dl->AddText(ImVec2(wpos.x + 6, bottom - 32), IM_COL32(180, 180, 180, 255), format_bytes(whole_bytes(ymax / 1.05)).c_str());
  dl->AddText(ImVec2(wpos.x + 6, bottom - 16), IM_COL32(180, 180, 180, 255), "0 B");
  // Legend.
  float lx = left + 6;
  for (const auto& [name, rgb] : legend) {
    dl->AddRectFilled(ImVec2(lx, top + 4), ImVec2(lx + 10, top + 14), rgb.imgui());
    dl->AddText(ImVec2(lx + 13, top + 1), IM_COL32(220, 220, 220, 255), name);
    lx += 13 + ImGui::CalcTextSize(name).x + 14;
  }
  const ImVec2 m = ImGui::GetIO().MousePos;
  if (hovered && m.x >= left && m.x < right && m.y >= top && m.y < bottom) {
    const TimeNs t = view.t(m.x);
    std::string tip = fmt::format("rank {} at {}", rd.rank, format_time(t - st.tl.begin));
    double v;
    for (const auto* c : {allocated, active, reserved, largest})
      if (c && c->value_at(t, v)) tip += fmt::format("\n{}: {}", c->name(), format_bytes(whole_bytes(v)));
    for (const auto& c : rd.counters)
      if (c.name().rfind("cat:", 0) == 0 && c.value_at(t, v)) tip += fmt::format("\n  {}: {}", c.name().substr(4), format_bytes(whole_bytes(v)));
    if (frag && frag->value_at(t, v)) tip += fmt::format("\nfragmentation: {:.1f}%", v * 100);
    ImGui::SetTooltip("%s", tip.c_str());
    st.note_tooltip(tip);
  }
  ImGui::EndChild();
}

}  // namespace memcomm::view
