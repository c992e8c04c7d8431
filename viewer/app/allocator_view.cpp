// Allocator state at the cursor: each segment a bar of its blocks (allocated / pending free /
// free), like memory_viz's Allocator State History, with a scrub bar. The state comes from
// AllocatorTimeline::seek (Note [Incremental allocator state]), never from a walk of all events.
#include <memcomm/view/app/palette.hpp>

#include "views.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace memcomm::view {

namespace {

// The scrub bar: moves st.alloc_time (and stops following the cursor when dragged).
void draw_scrub(AppState& st, const RankData& rd) {
  if (st.alloc_follow_cursor && st.cursor_valid) st.alloc_time = st.cursor;
  const TimeNs lo = rd.alloc_events.front().t, hi = rd.alloc_events.back().t;
  ImGui::Checkbox("follow cursor", &st.alloc_follow_cursor);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(std::max(100.0f, ImGui::GetContentRegionAvail().x));
  long long t = std::clamp<long long>(st.alloc_time, lo, hi);
  const std::string label = format_time(t - st.tl.time_zero());
  if (ImGui::SliderScalar("##scrub", ImGuiDataType_S64, &t, &lo, &hi, label.c_str())) {
    st.alloc_time = t;
    st.alloc_follow_cursor = false;
  }
}

// One segment's bar at `p`, `w` pixels wide: its backing (mapped or whole), then its blocks.
void draw_segment(ImDrawList* dl, const SegmentRec& seg, ImVec2 p, float w, float row_h) {
  const double px_per_byte = w / static_cast<double>(seg.extent_end() - seg.addr);
  if (seg.expandable) {  // unmapped space dark, mapped space as free
    dl->AddRectFilled(p, ImVec2(p.x + w, p.y + row_h - 2), palette::kSegmentUnmapped.imgui());
    for (const auto& r : seg.mapped) {
      const float x0 = p.x + static_cast<float>(static_cast<double>(r.begin - seg.addr) * px_per_byte);
      const float x1 = std::min(p.x + w, p.x + static_cast<float>(static_cast<double>(r.end - seg.addr) * px_per_byte));
      if (x1 > x0) dl->AddRectFilled(ImVec2(x0, p.y), ImVec2(std::max(x1, x0 + 1), p.y + row_h - 2), palette::kSegmentFree.imgui());
    }
  } else {
    dl->AddRectFilled(p, ImVec2(p.x + w, p.y + row_h - 2), palette::kSegmentFree.imgui());
  }
  // Blocks narrower than a pixel accumulate into the pixel they fall in.
  float last_x = -1;
  for (const auto& b : seg.blocks) {
    const float x0 = p.x + static_cast<float>((b.addr - seg.addr) * px_per_byte);
    const float x1 = std::max(x0 + 1, p.x + static_cast<float>((b.addr + b.size - seg.addr) * px_per_byte));
    if (x1 <= last_x) continue;
    last_x = x1;
    const auto c = b.state == BlockState::Allocated ? palette::kBlockAllocated : palette::kBlockPending;
    dl->AddRectFilled(ImVec2(x0, p.y), ImVec2(x1, p.y + row_h - 2), c.imgui());
  }
}

// The segment and, under the mouse at `addr`, the block (or free space).
std::string segment_tip(const SegmentRec& seg, std::uint64_t addr) {
  std::string tip =
      seg.expandable
          ? fmt::format("expandable segment 0x{:x}  mapped {} of virtual {}  stream {}  {} blocks  largest free {}", seg.addr,
                        format_bytes(seg.mapped_bytes), format_bytes(seg.size), seg.stream, seg.blocks.size(),
                        format_bytes(seg.largest_free()))
          : fmt::format("segment 0x{:x}  {}  stream {}  {} blocks  largest free {}", seg.addr, format_bytes(seg.size),
                        seg.stream, seg.blocks.size(), format_bytes(seg.largest_free()));
  auto it = std::upper_bound(seg.blocks.begin(), seg.blocks.end(), addr,
                             [](std::uint64_t a, const BlockRec& b) { return a < b.addr; });
  if (it != seg.blocks.begin() && addr < std::prev(it)->addr + std::prev(it)->size) {
    const auto& b = *std::prev(it);
    tip += fmt::format("\nblock 0x{:x}  {}  {}", b.addr, format_bytes(b.size),
                       b.state == BlockState::Allocated ? "allocated" : "pending free");
  } else {
    tip += "\nfree";
  }
  return tip;
}

// The segments, one row each, only the visible rows drawn. `live_only`: only segments holding a
// block (a trace without segments: each block's implicit segment outlives the block).
void draw_segments(AppState& st, const AllocatorState& s, bool live_only) {
  static std::vector<const SegmentRec*> rows;
  rows.clear();
  std::uint64_t biggest = 1;
  for (const auto& seg : s.segments) {
    if (live_only && seg.blocks.empty()) continue;
    rows.push_back(&seg);
    biggest = std::max(biggest, seg.extent_end() - seg.addr);
  }
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float width = ImGui::GetContentRegionAvail().x, row_h = 14;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  ImGuiListClipper clipper;
  clipper.Begin(static_cast<int>(rows.size()), row_h);
  while (clipper.Step()) {
    for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
      const SegmentRec& seg = *rows[static_cast<std::size_t>(i)];
      const ImVec2 p = ImGui::GetCursorScreenPos();
      const std::uint64_t extent = seg.extent_end() - seg.addr;
      const float w = std::max(2.0f, width * static_cast<float>(static_cast<double>(extent) / static_cast<double>(biggest)));
      draw_segment(dl, seg, p, w, row_h);
      if (ImGui::IsWindowHovered() && mouse.y >= p.y && mouse.y < p.y + row_h && mouse.x >= p.x && mouse.x < p.x + w) {
        const double px_per_byte = w / static_cast<double>(extent);
        const std::string tip = segment_tip(seg, seg.addr + static_cast<std::uint64_t>((mouse.x - p.x) / px_per_byte));
        ImGui::SetTooltip("%s", tip.c_str());
        st.note_tooltip(tip);
      }
      ImGui::Dummy(ImVec2(width, row_h));
    }
  }
}

}  // namespace

void draw_allocator(AppState& st, ImVec2 size) {
  ImGui::BeginChild("allocator", size, true, ImGuiWindowFlags_NoMove);
  if (st.tl.ranks.empty() || st.alloc.empty()) {
    ImGui::TextUnformatted("Allocator state: no data");
    ImGui::EndChild();
    return;
  }
  const auto slot = static_cast<std::size_t>(st.memory_rank);
  const RankData& rd = st.tl.ranks[slot];
  if (rd.alloc_events.empty()) {
    ImGui::Text("Allocator state: %s has no allocator events", rank_name(rd).c_str());
    ImGui::EndChild();
    return;
  }
  draw_scrub(st, rd);
  AllocatorTimeline& at = *st.alloc[slot];
  const AllocatorState& s = at.seek(st.alloc_time);
  // Reserved is what device memory backs (Note [Virtual reservations]); an expandable segment's
  // virtual reservation is shown apart, and its bar spans only what it has mapped or holds.
  const std::string virt = s.virtual_reserved
                               ? fmt::format("  (virtual {})", format_bytes(s.virtual_reserved))
                               : std::string();
  if (at.segments_recorded()) {
    ImGui::Text("%s  event %zu/%zu  segments %zu  blocks %zu  allocated %s  pending free %s  reserved %s%s  largest free %s  (seek cost %zu events)",
                rank_name(rd).c_str(), at.position(), rd.alloc_events.size(), s.segments.size(), s.block_count,
                format_bytes(s.allocated).c_str(), format_bytes(s.pending_free).c_str(),
                format_bytes(s.reserved).c_str(), virt.c_str(),
                format_bytes(s.largest_free()).c_str(), at.last_seek_cost());
  } else {  // e.g. torch.profiler's [memory] events: blocks only, reserved is the samples' curve
    ImGui::Text("%s  event %zu/%zu  blocks %zu  allocated %s seen by the trace  (no allocator segments recorded: one bar "
                "per live block; reserved memory is the Memory pane's curve)  (seek cost %zu events)",
                rank_name(rd).c_str(), at.position(), rd.alloc_events.size(), s.block_count, format_bytes(s.allocated).c_str(),
                at.last_seek_cost());
  }
  st.alloc_status = {s.reserved, s.virtual_reserved, s.allocated};
  draw_segments(st, s, !at.segments_recorded());
  ImGui::EndChild();
}

}  // namespace memcomm::view
