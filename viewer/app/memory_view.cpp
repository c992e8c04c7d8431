// Memory over time: allocated (filled), active and reserved (lines), largest free block, OOM
// markers, for one rank. Curves come from CounterSeries::query, O(pixels) at any zoom.
#include <memcomm/view/app/palette.hpp>

#include "views.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace memcomm::view {

namespace {

// The frame of the memory pane: where it draws, and the y scale.
struct MemoryPlot {
  ImDrawList* dl;
  float left, right, top, bottom;
  double ymax;
  int pixels;
  float y(double v) const { return bottom - static_cast<float>(v / ymax) * (bottom - top); }
};

// The rank picker; false when there is no rank to show.
bool pick_rank(AppState& st) {
  ImGui::TextUnformatted("Memory");
  if (st.tl.ranks.empty()) return false;
  ImGui::SetNextItemWidth(st.label_width - 16);
  const std::string cur = rank_name(st.tl.ranks[static_cast<std::size_t>(st.memory_rank)]);
  if (ImGui::BeginCombo("##memrank", cur.c_str())) {
    for (std::size_t i = 0; i < st.tl.ranks.size(); ++i)
      if (ImGui::Selectable(rank_name(st.tl.ranks[i]).c_str(), static_cast<int>(i) == st.memory_rank))
        st.memory_rank = static_cast<int>(i);
    ImGui::EndCombo();
  }
  return true;
}

// Allocated as a filled area; the min..max envelope of each column in full colour down to min,
// lighter between min and max (what a spike looks like when zoomed out).
void draw_filled(const MemoryPlot& p, const CounterSeries& s, const TimeAxis& view, std::vector<PixelMinMax>& col) {
  s.query(view.t0, view.t1, p.pixels, col);
  const auto c = palette::kAllocated.imgui();
  const ImU32 light = IM_COL32(palette::kAllocated.r, palette::kAllocated.g, palette::kAllocated.b, 150);
  for (int i = 0; i < p.pixels; ++i) {
    const PixelMinMax& px = col[static_cast<std::size_t>(i)];
    if (!px.valid) continue;
    const float x = p.left + static_cast<float>(i);
    p.dl->AddRectFilled(ImVec2(x, p.y(px.min)), ImVec2(x + 1, p.bottom), c);
    if (px.max > px.min) p.dl->AddRectFilled(ImVec2(x, p.y(px.max)), ImVec2(x + 1, p.y(px.min)), light);
  }
}

void draw_line(const MemoryPlot& p, const CounterSeries* s, palette::Rgb rgb, const TimeAxis& view,
               std::vector<PixelMinMax>& col) {
  if (!s) return;
  s->query(view.t0, view.t1, p.pixels, col);
  for (int i = 0; i < p.pixels; ++i) {
    const auto& px = col[static_cast<std::size_t>(i)];
    if (!px.valid) continue;
    const float x = p.left + static_cast<float>(i);
    p.dl->AddRectFilled(ImVec2(x, p.y(px.max) - 1), ImVec2(x + 1, p.y(px.min) + 1), rgb.imgui());
  }
}

using Legend = std::vector<std::pair<const char*, palette::Rgb>>;

// Categories (parameters, gradients, optimizer state, activations...) where the trace labels blocks.
void draw_categories(const MemoryPlot& p, const RankData& rd, const TimeAxis& view, std::vector<PixelMinMax>& col,
                     Legend& legend) {
  for (const auto& c : rd.counters) {
    if (c.name().rfind("cat:", 0) != 0) continue;
    for (int k = 0; k < kMemCategoryCount; ++k)
      if (c.name().compare(4, std::string::npos, kMemCategoryNames[k]) == 0) {
        draw_line(p, &c, palette::kCategory[k], view, col);
        legend.emplace_back(kMemCategoryNames[k], palette::kCategory[k]);
      }
  }
}

// OOM markers: binary search for the visible ones.
void draw_ooms(const MemoryPlot& p, const RankData& rd, const TimeAxis& view) {
  auto it = std::lower_bound(rd.ooms.begin(), rd.ooms.end(), view.t0);
  for (; it != rd.ooms.end() && *it < view.t1; ++it) {
    const float x = view.x(*it);
    p.dl->AddLine(ImVec2(x, p.top), ImVec2(x, p.bottom), palette::kOom.imgui(), 2);
    p.dl->AddTriangleFilled(ImVec2(x - 5, p.top), ImVec2(x + 5, p.top), ImVec2(x, p.top + 8), palette::kOom.imgui());
  }
}

// The legend's row, above the curves (kLegendRow): drawn over them, the top lines ran through its words.
constexpr float kLegendRow = 16;

void draw_legend(const MemoryPlot& p, const Legend& legend) {
  float lx = p.left + 6;
  const float y = p.top - kLegendRow;
  for (const auto& [name, rgb] : legend) {
    p.dl->AddRectFilled(ImVec2(lx, y + 4), ImVec2(lx + 10, y + 14), rgb.imgui());
    p.dl->AddText(ImVec2(lx + 13, y + 1), IM_COL32(220, 220, 220, 255), name);
    lx += 13 + ImGui::CalcTextSize(name).x + 14;
  }
}

void show_tooltip(AppState& st, const RankData& rd, TimeNs t) {
  std::string tip = fmt::format("{} at {}", rank_name(rd), format_time(t - st.tl.time_zero()));
  double v;
  for (const char* name : {"allocated", "active", "reserved", "largest_free"})
    if (const CounterSeries* c = rd.counter(name); c && c->value_at(t, v))
      tip += fmt::format("\n{}: {}", c->name(), format_bytes(whole_bytes(v)));
  for (const auto& c : rd.counters)
    if (c.name().rfind("cat:", 0) == 0 && c.value_at(t, v))
      tip += fmt::format("\n  {}: {}", c.name().substr(4), format_bytes(whole_bytes(v)));
  if (const CounterSeries* frag = rd.counter("fragmentation"); frag && frag->value_at(t, v))
    tip += fmt::format("\nfragmentation: {:.1f}%", v * 100);
  ImGui::SetTooltip("%s", tip.c_str());
  st.note_tooltip(tip);
}

}  // namespace

void draw_memory(AppState& st, ImVec2 size) {
  ImGui::BeginChild("memory", size, true, ImGuiWindowFlags_NoScrollWithMouse | ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoMove);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 wpos = ImGui::GetWindowPos(), wsize = ImGui::GetWindowSize();
  const float left = wpos.x + st.label_width, right = wpos.x + wsize.x - ImGui::GetStyle().ScrollbarSize;
  const float top = wpos.y + 6 + kLegendRow, bottom = wpos.y + wsize.y - 6;
  const bool hovered = ImGui::IsWindowHovered();
  const TimeAxis axis(st, left, right);
  handle_time_input(st, axis, ImVec2(left, top), ImVec2(right, bottom), hovered);
  const TimeAxis view(st, left, right);
  if (!pick_rank(st)) {
    ImGui::EndChild();
    return;
  }
  const float scale_y = ImGui::GetCursorScreenPos().y;  // below the picker
  const RankData& rd = st.tl.ranks[static_cast<std::size_t>(st.memory_rank)];
  const CounterSeries* allocated = rd.counter("allocated");
  if (!records_memory(rd)) {  // an empty plot said nothing
    dl->AddText(ImVec2(left + 8, top + 4), IM_COL32(180, 180, 180, 255),
                fmt::format("{} recorded no memory (python -m memcomm --allocator, torch.profiler's profile_memory=True, "
                            "a memcomm-train trace or a snapshot record it)", rank_name(rd)).c_str());
    ImGui::EndChild();
    return;
  }
  double ymax = 1;
  for (const auto* c : {allocated, rd.counter("reserved"), rd.counter("active")})
    if (c) ymax = std::max(ymax, c->global_max());
  ymax *= 1.05;
  const MemoryPlot p{dl, left, right, top, bottom, ymax, std::max(1, static_cast<int>(right - left))};
  st.time_x0 = left;
  st.time_x1 = right;
  st.mem_y0 = top;
  st.mem_y1 = bottom;
  st.mem_ymax = ymax;
  static std::vector<PixelMinMax> col;
  dl->PushClipRect(ImVec2(left, top), ImVec2(right, bottom), true);
  dl->AddRectFilled(ImVec2(left, top - kLegendRow), ImVec2(right, bottom), IM_COL32(25, 25, 30, 255));
  if (allocated) draw_filled(p, *allocated, view, col);
  draw_line(p, rd.counter("reserved"), palette::kReserved, view, col);
  draw_line(p, rd.counter("active"), palette::kActive, view, col);
  draw_line(p, rd.counter("largest_free"), palette::kLargestFree, view, col);
  Legend legend = {{"allocated", palette::kAllocated}, {"active", palette::kActive}, {"reserved", palette::kReserved},
                   {"largest free", palette::kLargestFree}};
  draw_categories(p, rd, view, col, legend);
  draw_ooms(p, rd, view);
  draw_overlays(st, view, dl, top, bottom);
  dl->PopClipRect();
  // The scale's top, under the rank picker and named (drawn above "0 B" it read as a tick near zero).
  dl->AddText(ImVec2(wpos.x + 6, std::max(top, scale_y)), IM_COL32(180, 180, 180, 255),
              ("max " + format_bytes(whole_bytes(ymax / 1.05))).c_str());
  dl->AddText(ImVec2(wpos.x + 6, bottom - 16), IM_COL32(180, 180, 180, 255), "0 B");
  draw_legend(p, legend);
  const ImVec2 m = ImGui::GetIO().MousePos;
  if (hovered && m.x >= left && m.x < right && m.y >= top && m.y < bottom) show_tooltip(st, rd, view.t(m.x));
  ImGui::EndChild();
}

}  // namespace memcomm::view
