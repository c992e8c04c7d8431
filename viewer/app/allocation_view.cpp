// The allocation timeline (issue 18): every allocation of the memory rank as a band from its alloc
// to its free, stacked as memory_viz's Active Memory Timeline, on the shared time axis. The
// geometry is the model's (Note [Allocation bands] in memcomm/view/allocation_layout.hpp), redone
// only when the view, the rank or the plot changes. Hover: the allocation's tooltip (the model's
// AllocationTip, what --report-json writes); click: pin it (its lifetime is marked on every time
// pane); the search box matches file and function names in its stack (StackText::site_matches).
#include <memcomm/view/app/palette.hpp>

#include "views.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace memcomm::view {
namespace {

constexpr ImU32 kMergedColour = IM_COL32(120, 120, 130, 255);

// The plot: where it draws and its y scale (bytes at the top edge).
struct AllocPlot {
  ImDrawList* dl;
  float left, right, top, bottom;
  double ymax;
  float y(double bytes) const { return bottom - static_cast<float>(bytes / ymax) * (bottom - top); }
  double bytes(float py) const { return (bottom - py) / std::max(1.0f, bottom - top) * ymax; }
};

std::uint32_t site_of(const RankData& rd, const prof::Allocation& a) {
  return rd.stacks ? rd.stacks->text.site(a.stack) : 0;
}

// A band's colour: one per site (per allocation without stacks), memory_viz-like hues.
ImU32 band_colour(const RankData& rd, std::uint32_t index, bool dim) {
  const prof::Allocation& a = rd.allocations.list[index];
  const std::uint32_t key = rd.stacks && a.stack != prof::kNoStackId ? site_of(rd, a) : index;
  const std::uint32_t h = key * 2654435761u;
  const int r = 70 + static_cast<int>(h & 0x7f), g = 70 + static_cast<int>((h >> 8) & 0x7f), b = 90 + static_cast<int>((h >> 16) & 0x7f);
  return IM_COL32(r, g, b, dim ? 60 : 255);
}

// The search: which sites of the memory rank match (recomputed when the text, rank or data change).
void apply_alloc_search(AppState& st, const RankData& rd) {
  if (st.alloc_search_applied == st.alloc_search && st.alloc_search_rank == st.memory_rank &&
      st.alloc_search_generation == st.data_generation)
    return;
  st.alloc_search_applied = st.alloc_search;
  st.alloc_search_rank = st.memory_rank;
  st.alloc_search_generation = st.data_generation;
  st.site_match.assign(rd.stacks ? rd.stacks->text.site_count() : 0, false);
  for (std::size_t s = 0; s < st.site_match.size() && !st.alloc_search_applied.empty(); ++s)
    st.site_match[s] = rd.stacks->text.site_matches(static_cast<std::uint32_t>(s), st.alloc_search_applied);
}

bool matches(const AppState& st, const RankData& rd, std::uint32_t index) {
  if (st.alloc_search_applied.empty()) return true;
  const std::uint32_t s = site_of(rd, rd.allocations.list[index]);
  return rd.stacks && s < st.site_match.size() && st.site_match[s];
}

void toolbar(AppState& st) {
  ImGui::TextUnformatted("Allocations");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(200);
  ImGui::InputTextWithHint("##allocsearch", "file or function in stacks", st.alloc_search, sizeof st.alloc_search);
  st.alloc_search_box = item_centre();
  ImGui::SameLine();
  ImGui::Checkbox("show all frames", &st.all_frames);
  st.all_frames_box = item_centre();
  if (!st.alloc_search_applied.empty()) {
    ImGui::SameLine();
    ImGui::Text("%llu matching bands", static_cast<unsigned long long>(st.alloc_search_hits));
  }
}

void relayout(AppState& st, const RankData& rd, const AllocPlot& p, const TimeAxis& view) {
  const LayoutRequest req{view.t0, view.t1, static_cast<int>(p.right - p.left), p.ymax / std::max(1.0f, p.bottom - p.top)};
  const LayoutRequest& last = st.alloc_layout_req;
  if (last.t0 == req.t0 && last.t1 == req.t1 && last.columns == req.columns && last.bytes_per_px == req.bytes_per_px &&
      st.alloc_layout_rank == st.memory_rank && st.alloc_layout_generation == st.data_generation)
    return;
  st.alloc_layout_req = req;
  st.alloc_layout_rank = st.memory_rank;
  st.alloc_layout_generation = st.data_generation;
  layout_allocations(rd.allocations, rd.alloc_index, req, st.alloc_layout);
}

void draw_bands(AppState& st, const RankData& rd, const AllocPlot& p) {
  st.alloc_search_hits = 0;
  for (const AllocationBand& b : st.alloc_layout.bands) {
    const bool hit = matches(st, rd, b.alloc);
    st.alloc_search_hits += hit && !st.alloc_search_applied.empty();
    p.dl->AddRectFilled(ImVec2(p.left + static_cast<float>(b.c0), p.y(static_cast<double>(b.y1))),
                        ImVec2(p.left + static_cast<float>(b.c1), p.y(static_cast<double>(b.y0))), band_colour(rd, b.alloc, !hit));
    if (st.pinned_rank == st.memory_rank && static_cast<int>(b.alloc) == st.pinned_alloc)
      p.dl->AddRect(ImVec2(p.left + static_cast<float>(b.c0), p.y(static_cast<double>(b.y1))),
                    ImVec2(p.left + static_cast<float>(b.c1), p.y(static_cast<double>(b.y0))), IM_COL32(255, 220, 60, 255), 0, 0, 2);
  }
  const auto& merged = st.alloc_layout.merged;
  for (std::size_t c = 0; c < merged.size(); ++c)
    if (merged[c].bytes > 0) {
      const float x = p.left + static_cast<float>(c);
      p.dl->AddRectFilled(ImVec2(x, p.y(static_cast<double>(merged[c].y0 + merged[c].bytes))),
                          ImVec2(x + 1, p.y(static_cast<double>(merged[c].y0))), kMergedColour);
    }
}

// Hover and click over the plot.
void hover(AppState& st, const RankData& rd, const AllocPlot& p) {
  const ImVec2 m = ImGui::GetIO().MousePos;
  if (m.x < p.left || m.x >= p.right || m.y < p.top || m.y >= p.bottom) return;
  const int column = static_cast<int>(m.x - p.left);
  const int hit = hit_band(st.alloc_layout, column, p.bytes(m.y));
  if (hit == kMergedHit) {
    const MergedColumn& mc = st.alloc_layout.merged[static_cast<std::size_t>(column)];
    const std::string tip = fmt::format("{} allocations under one pixel, {}", mc.count, format_bytes(mc.bytes));
    ImGui::SetTooltip("%s", tip.c_str());
    st.note_tooltip(tip);
    return;
  }
  if (hit == kNoHit) return;
  const std::uint32_t index = st.alloc_layout.bands[static_cast<std::size_t>(hit)].alloc;
  st.hovered_alloc = allocation_tip(rd, index, st.all_frames);
  st.has_hovered_alloc = true;
  const std::string tip = tip_text(st.hovered_alloc, st.tl.time_zero());
  ImGui::SetTooltip("%s", tip.c_str());
  st.note_tooltip(tip);
  const ImGuiIO& io = ImGui::GetIO();
  if (ImGui::IsMouseReleased(ImGuiMouseButton_Left) && io.MouseDragMaxDistanceSqr[0] < 16) {  // a click, not a pan
    st.pinned_alloc = static_cast<int>(index);
    st.pinned_rank = st.memory_rank;
    st.pinned_rank_id = rd.rank;
    st.pinned_addr = st.hovered_alloc.addr;
    // Bounded (Note [Bounded timestamps] in timeline.hpp): the time panes subtract these.
    st.pinned_t0 = bounded_time(st.hovered_alloc.alloc_ns);
    st.pinned_t1 = st.hovered_alloc.free_ns == prof::kStillLive ? st.tl.end : bounded_time(st.hovered_alloc.free_ns);
  }
}

}  // namespace

void draw_allocations(AppState& st, ImVec2 size) {
  ImGui::BeginChild("allocations", size, true, ImGuiWindowFlags_NoScrollWithMouse | ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoMove);
  toolbar(st);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 wpos = ImGui::GetWindowPos(), wsize = ImGui::GetWindowSize();
  const float left = wpos.x + st.label_width, right = wpos.x + wsize.x - ImGui::GetStyle().ScrollbarSize;
  const float top = ImGui::GetCursorScreenPos().y + 2, bottom = wpos.y + wsize.y - 6;
  const bool hovered = ImGui::IsWindowHovered();
  handle_time_input(st, TimeAxis(st, left, right), ImVec2(left, top), ImVec2(right, bottom), hovered);
  if (st.tl.ranks.empty() || bottom <= top + 4) {
    ImGui::EndChild();
    return;
  }
  const RankData& rd = st.tl.ranks[static_cast<std::size_t>(st.memory_rank)];
  const TimeAxis view(st, left, right);
  st.refresh_peak();
  const AllocPlot p{dl, left, right, top, bottom, std::max(1.0, 1.05 * static_cast<double>(st.alloc_peak.bytes))};
  st.alloc_x0 = left;
  st.alloc_y0 = top;
  st.alloc_y1 = bottom;
  st.alloc_ymax = p.ymax;
  apply_alloc_search(st, rd);
  relayout(st, rd, p, view);
  dl->PushClipRect(ImVec2(left, top), ImVec2(right, bottom), true);
  dl->AddRectFilled(ImVec2(left, top), ImVec2(right, bottom), IM_COL32(25, 25, 30, 255));
  draw_bands(st, rd, p);
  draw_overlays(st, view, dl, top, bottom);
  dl->PopClipRect();
  dl->AddText(ImVec2(wpos.x + 6, top + 2), IM_COL32(180, 180, 180, 255), format_bytes(whole_bytes(p.ymax / 1.05)).c_str());
  if (rd.allocations.list.empty()) dl->AddText(ImVec2(left + 8, top + 8), IM_COL32(180, 180, 180, 255), "no allocations in this rank");
  if (hovered) hover(st, rd, p);
  ImGui::EndChild();
}

}  // namespace memcomm::view
