// Timeline pane: one lane group per rank (phases, NVTX, per-stream kernels/memcpy/memset,
// collectives), with merged narrow spans, matched-collective links and straggler highlight.
#include <memcomm/view/app/palette.hpp>
#include <memcomm/view/span_query.hpp>

#include "views.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace memcomm::view {

namespace {

constexpr float kRuler = 20, kHeader = 20, kRow = 17;

struct Hover {
  int slot = -1;            // rank slot
  const Lane* lane = nullptr;
  int row = 0;
  DrawSpan span;
};

std::string span_tooltip(const AppState& st, const RankData& rd, const Lane& lane, const SpanRow& row,
                         const DrawSpan& d) {
  if (d.count > 1)
    return fmt::format("{} merged {} spans\n{} {}\n{} .. {} ({})", d.count, lane_kind_name(lane.kind), rank_name(rd),
                       lane.name, format_time(d.start - st.tl.time_zero()), format_time(d.end - st.tl.time_zero()),
                       format_time(d.end - d.start));
  const Span& s = row[d.first];
  const std::string& name = st.tl.strings.get(s.name);
  if (lane.kind == LaneKind::Collective) {
    const Collective& c = rd.collectives[s.payload];
    // algbw/busbw are the matched collective's, over its time from the last arrival (Note
    // [Collective bandwidth] in the profiler's analysis.hpp), as memcomm-trace report gives them.
    std::string t = fmt::format("{} (collective)\nrank {}  comm {}  seq {}\nbytes {} ({})\nduration {}  (from the last arrival {})\nalgbw {:.2f} GB/s  busbw {:.2f} GB/s\nranks {}  skew {}",
                                name, rd.rank, c.comm, c.seq, c.bytes, format_bytes(c.bytes), format_time(c.end - c.start),
                                format_time(c.time), c.algbw, c.busbw, c.group_size, format_time(c.skew));
    if (c.straggler) t += "\nSTRAGGLER: last rank to arrive";
    return t;
  }
  std::string t = fmt::format("{}\n{} on {} ({})\nstart {}\nduration {}", name, lane_kind_name(lane.kind), rank_name(rd),
                              lane.name, format_time(s.start - st.tl.time_zero()), format_time(s.end - s.start));
  if (lane.kind == LaneKind::Phase && st.name_phase[s.name] == prof::Phase::Step) t += fmt::format("\nstep {}", s.payload);
  return t;
}

// What one frame of the pane draws with: its geometry and view, the mouse, and what the lanes
// leave for after them (the span under the mouse, each rank's collective row, the links to draw).
struct TimelineFrame {
  ImDrawList* dl;
  ImVec2 wpos;
  float left, right, top, bottom;
  TimeAxis view;
  TimeNs min_ns;  // narrower spans merge (3 px)
  bool hovered;
  ImVec2 mouse;
  bool mouse_in_canvas;
  Hover hover;
  std::vector<float> coll_y;  // per rank slot: y of its collective row 0, -1 when not drawn
  struct LinkLine {
    ImVec2 a, b;  // b: (next rank slot, collective index) until the links are drawn
  };
  std::vector<LinkLine> links;
};

// Rank header: click toggles the lane group.
void draw_rank_header(AppState& st, TimelineFrame& f, std::size_t slot, float y) {
  const RankData& rd = st.tl.ranks[slot];
  const ImVec2 h0(f.wpos.x, y), h1(f.right, y + kHeader);
  st.layout.push_back({static_cast<int>(slot), -1, 0, y, kHeader});
  if (y + kHeader < f.top || y >= f.bottom) return;
  f.dl->AddRectFilled(h0, h1, IM_COL32(45, 45, 55, 255));
  std::string title = fmt::format("{} {}{}{}", st.collapsed[slot] ? "+" : "-", rank_name(rd), rd.host.empty() ? "" : "  " + rd.host,
                                  (rd.connected || st.live_status.empty()) ? ""
                                  : rd.stream_ended                        ? "  (ended)"
                                                                           : "  (disconnected)");
  if (rd.dropped) title += fmt::format("  drops {}", rd.dropped);
  f.dl->AddText(ImVec2(f.wpos.x + 4, y + 3), IM_COL32(230, 230, 230, 255), title.c_str());
  if (f.hovered && ImGui::IsMouseClicked(0) && f.mouse.y >= h0.y && f.mouse.y < h1.y && f.mouse.x < f.left)
    st.collapsed[slot] = !st.collapsed[slot];
}

// One row of a lane at y: its spans in view (narrow ones merged), labels, search marks, the span
// under the mouse, and the links from matched collectives to the next rank's instance.
void draw_row(AppState& st, TimelineFrame& f, std::size_t slot, std::size_t li, std::size_t r, float y) {
  static std::vector<DrawSpan> marks;
  const RankData& rd = st.tl.ranks[slot];
  const Lane& lane = rd.lanes[li];
  st.layout.push_back({static_cast<int>(slot), static_cast<int>(li), static_cast<int>(r), y, kRow});
  const auto& row = lane.rows[r];
  marks.clear();
  query_spans(row, f.view.t0, f.view.t1, f.min_ns, marks);
  st.drawn_marks += marks.size();
  for (const DrawSpan& d : marks) {
    const float x0 = std::max(f.left, f.view.x(d.start));
    const float x1 = std::min(f.right, std::max(f.view.x(d.end), x0 + 1));
    palette::Rgb c;
    const Span& first = row[d.first];
    if (lane.kind == LaneKind::Collective && d.count == 1 && rd.collectives[first.payload].straggler)
      c = palette::kStraggler;
    else
      c = palette::lane_colour(lane.kind, lane.kind == LaneKind::Phase ? st.name_phase[first.name] : prof::Phase::Custom);
    if (d.count > 1) c = palette::darken(c);
    const ImVec2 a(x0, y + 1), b(x1, y + kRow - 1);
    f.dl->AddRectFilled(a, b, c.imgui());
    if (d.count == 1 && !st.search_applied.empty() && st.search_match[first.name])
      f.dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(b.x + 1, b.y + 1), IM_COL32(255, 255, 0, 255), 0, 0, 2);
    if (x1 - x0 > 30) {
      const std::string label = d.count > 1 ? fmt::format("{}x", d.count) : st.tl.strings.get(first.name);
      const ImVec4 clip(x0 + 2, a.y, x1 - 2, b.y);
      f.dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), ImVec2(x0 + 3, y + 1), IM_COL32(255, 255, 255, 255),
                    label.c_str(), label.c_str() + label.size(), 0, &clip);
    }
    if (f.mouse_in_canvas && f.mouse.x >= a.x - 1 && f.mouse.x < b.x + 1 && f.mouse.y >= y && f.mouse.y < y + kRow)
      f.hover = {static_cast<int>(slot), &lane, static_cast<int>(r), d};
    if (lane.kind == LaneKind::Collective && d.count == 1) {
      const Collective& col = rd.collectives[first.payload];
      if (col.next_rank >= 0)
        f.links.push_back({ImVec2((x0 + x1) / 2, y + kRow - 1), ImVec2(static_cast<float>(col.next_rank), static_cast<float>(col.next_index))});
    }
  }
}

// Links, once every rank's collective row is placed.
void draw_links(AppState& st, const TimelineFrame& f) {
  st.links_drawn = 0;
  for (const auto& l : f.links) {
    const auto slot = static_cast<std::size_t>(l.b.x);
    if (slot >= f.coll_y.size() || f.coll_y[slot] < 0) continue;
    const Collective& p = st.tl.ranks[slot].collectives[static_cast<std::size_t>(l.b.y)];
    const float px = (std::max(f.left, f.view.x(p.start)) + std::min(f.right, std::max(f.view.x(p.end), f.view.x(p.start) + 1))) / 2;
    f.dl->AddLine(l.a, ImVec2(px, f.coll_y[slot] + 1), palette::kLink.imgui(), 1.0f);
    ++st.links_drawn;
  }
}

// The tooltip of the span under the mouse; a double click zooms to it.
void show_hover(AppState& st, const Hover& hover) {
  if (hover.lane == nullptr) return;
  const RankData& rd = st.tl.ranks[static_cast<std::size_t>(hover.slot)];
  const std::string tip = span_tooltip(st, rd, *hover.lane, hover.lane->rows[static_cast<std::size_t>(hover.row)], hover.span);
  ImGui::SetTooltip("%s", tip.c_str());
  st.note_tooltip(tip);
  if (ImGui::IsMouseDoubleClicked(0)) st.zoom_to(hover.span.start, hover.span.end);
}

}  // namespace

void draw_timeline(AppState& st, ImVec2 size) {
  ImGui::BeginChild("timeline", size, true, ImGuiWindowFlags_NoScrollWithMouse | ImGuiWindowFlags_NoMove);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 wpos = ImGui::GetWindowPos(), wsize = ImGui::GetWindowSize();
  const float left = wpos.x + st.label_width, right = wpos.x + wsize.x - ImGui::GetStyle().ScrollbarSize;
  const float top = wpos.y + kRuler, bottom = wpos.y + wsize.y;
  const TimeAxis axis(st, left, right);
  const bool hovered = ImGui::IsWindowHovered();
  ImGuiIO& io = ImGui::GetIO();

  // Vertical scrolling: wheel over the label column, or vertical drag on the canvas.
  if (hovered && io.MousePos.x < left && io.MouseWheel != 0)
    ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * kRow * 3);
  if (hovered && io.MousePos.x >= left && ImGui::IsMouseDragging(0, 1.0f) && !io.KeyShift)
    ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseDelta.y);
  handle_time_input(st, axis, ImVec2(left, top), ImVec2(right, bottom), hovered);
  const TimeAxis view(st, left, right);  // after this frame's zoom/pan
  const ImVec2 mouse = io.MousePos;
  TimelineFrame f{dl, wpos, left, right, top, bottom, view, std::max<TimeNs>(1, static_cast<TimeNs>(view.ns_per_px * 3)),
                  hovered, mouse, hovered && mouse.x >= left && mouse.x < right && mouse.y >= top && mouse.y < bottom,
                  Hover{}, std::vector<float>(st.tl.ranks.size(), -1), {}};

  // Layout pass: y of every lane (cheap: one entry per lane), and of each rank's collective row 0.
  float y = ImGui::GetCursorScreenPos().y + kRuler;
  const float content_top = y;
  st.drawn_marks = 0;
  st.layout.clear();
  st.time_x0 = left;
  st.time_x1 = right;
  dl->PushClipRect(ImVec2(wpos.x, top), ImVec2(right, bottom), true);
  for (std::size_t slot = 0; slot < st.tl.ranks.size(); ++slot) {
    draw_rank_header(st, f, slot, y);
    y += kHeader;
    if (st.collapsed[slot]) continue;
    const RankData& rd = st.tl.ranks[slot];
    for (std::size_t li = 0; li < rd.lanes.size(); ++li) {
      const Lane& lane = rd.lanes[li];
      if (lane.kind == LaneKind::Collective) f.coll_y[slot] = y;
      const float lane_top = y;
      for (std::size_t r = 0; r < lane.rows.size(); ++r, y += kRow)
        if (y + kRow >= top && y < bottom) draw_row(st, f, slot, li, r, y);  // vertical culling
      // Lane label (first row).
      if (lane_top + kRow >= top && lane_top < bottom) {  // cut at the time axis: spans drew over a long name
        dl->PushClipRect(ImVec2(wpos.x, top), ImVec2(left - 2, bottom), true);
        dl->AddText(ImVec2(wpos.x + 12, lane_top + 1), IM_COL32(180, 180, 180, 255), lane.name.c_str());
        dl->PopClipRect();
      }
    }
  }
  draw_links(st, f);
  draw_overlays(st, view, dl, top, bottom);
  dl->PopClipRect();
  draw_ruler(st, view, dl, wpos.y, kRuler);
  show_hover(st, f.hover);
  if (st.tl.empty())
    dl->AddText(ImVec2(left + 10, top + 10), IM_COL32(200, 200, 200, 255),
                "No data. Open a trace (File > Open, drag and drop, or memcomm-view FILE...).");
  ImGui::SetCursorScreenPos(ImVec2(wpos.x, content_top));
  ImGui::Dummy(ImVec2(1, std::max(1.0f, y - content_top)));
  // What the pane needs to show every lane: the ruler, the lanes and the child window's frame.
  st.timeline_content_h = y - content_top + kRuler + 2 * ImGui::GetStyle().WindowPadding.y + ImGui::GetStyle().ItemSpacing.y;
  ImGui::EndChild();
}

}  // namespace memcomm::view
