// Step table (click a row to zoom to that step), summary with advice, and the status line.
#include "views.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace memcomm::view {

void draw_steps(AppState& st, ImVec2 size) {
  ImGui::BeginChild("steps", size, true, ImGuiWindowFlags_NoMove);
  ImGui::Text("Steps (%zu)", st.steps.size());
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_Resizable;
  if (ImGui::BeginTable("steps_table", 9, flags)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    for (const char* h : {"rank", "step", "time", "comm", "exposed", "overlap", "data-wait", "peak alloc", "start"})
      ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    ImGuiListClipper clipper;
    st.step_row0_y = -1;
    clipper.Begin(static_cast<int>(st.steps.size()));
    while (clipper.Step()) {
      for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
        const StepRow& r = st.steps[static_cast<std::size_t>(i)];
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        if (st.step_row0_y < 0) st.step_row0_y = ImGui::GetCursorScreenPos().y + ImGui::GetTextLineHeight() / 2;
        const std::string id = fmt::format("{}##step{}", r.rank, i);
        if (ImGui::Selectable(id.c_str(), false, ImGuiSelectableFlags_SpanAllColumns)) {
          const TimeNs margin = (r.end - r.start) / 20;
          st.zoom_to(r.start - margin, r.end + margin);
        }
        ImGui::TableNextColumn();
        ImGui::Text("%u", r.index);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(r.end - r.start).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(r.comm).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(r.exposed_comm).c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%.1f%%", r.overlap_pct);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(r.data_wait).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_bytes(r.peak_allocated).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(r.start - st.tl.begin).c_str());
      }
    }
    ImGui::EndTable();
  }
  ImGui::EndChild();
}

void draw_summary(AppState& st, ImVec2 size) {
  ImGui::BeginChild("summary", size, true, ImGuiWindowFlags_NoMove);
  const Summary& s = st.summary;
  ImGui::TextUnformatted("Summary");
  ImGui::Text("ranks %zu  duration %s", st.tl.ranks.size(), format_time(s.duration).c_str());
  ImGui::Text("spans %llu  collectives %llu  samples %llu  allocator events %llu", static_cast<unsigned long long>(s.spans),
              static_cast<unsigned long long>(s.collectives), static_cast<unsigned long long>(s.samples),
              static_cast<unsigned long long>(s.alloc_events));
  ImGui::Text("peak allocated %s  peak reserved %s  OOMs %llu  drops %llu", format_bytes(s.peak_allocated).c_str(),
              format_bytes(s.peak_reserved).c_str(), static_cast<unsigned long long>(s.ooms),
              static_cast<unsigned long long>(s.dropped));
  ImGui::Text("mean busbw %.2f GB/s  max skew %s", s.mean_busbw, format_time(s.max_skew).c_str());
  std::string strag;
  for (std::size_t r = 0; r < 64; ++r)
    if (s.stragglers[r]) strag += fmt::format(" rank {}: {}x", r, s.stragglers[r]);
  if (!strag.empty()) ImGui::Text("last to arrive:%s", strag.c_str());
  // Advice: simple rules over the step table (summed when it changes, not per frame).
  const TimeNs step_sum = st.steps_time, exposed = st.steps_exposed, wait = st.steps_wait;
  if (step_sum > 0) {
    const double e = 100.0 * static_cast<double>(exposed) / static_cast<double>(step_sum);
    const double w = 100.0 * static_cast<double>(wait) / static_cast<double>(step_sum);
    ImGui::Text("exposed communication %.1f%% of step time, data-wait %.1f%%", e, w);
    if (e > 15) ImGui::TextWrapped("Advice: communication is exposed; larger gradient buckets or overlapping all-reduce with backward would hide it.");
    if (w > 10) ImGui::TextWrapped("Advice: the input pipeline stalls training; add data-loader workers or prefetch.");
  }
  if (s.peak_reserved > 0 && s.peak_allocated > 0 && s.peak_allocated / s.peak_reserved < 0.7)
    ImGui::TextWrapped("Advice: reserved memory is %.0f%% above allocated at peak (fragmentation or cache); try expandable segments.",
                       100.0 * (s.peak_reserved / s.peak_allocated - 1));
  if (st.has_selection) {
    const RangeStats& r = st.selection;
    ImGui::Separator();
    ImGui::Text("Selection %s .. %s (%s)", format_time(r.t0 - st.tl.begin).c_str(), format_time(r.t1 - st.tl.begin).c_str(),
                format_time(r.t1 - r.t0).c_str());
    ImGui::Text("spans %llu  collectives %llu (%s)", static_cast<unsigned long long>(r.spans),
                static_cast<unsigned long long>(r.collectives), format_bytes(static_cast<double>(r.collective_bytes)).c_str());
    ImGui::Text("busy: kernels %s  memcpy %s  collectives %s  phases %s", format_time(r.busy[1]).c_str(),
                format_time(r.busy[2]).c_str(), format_time(r.busy[4]).c_str(), format_time(r.busy[0]).c_str());
    if (r.mem_valid) ImGui::Text("allocated %s .. %s", format_bytes(r.mem_min).c_str(), format_bytes(r.mem_max).c_str());
  }
  if (!st.tl.sources.empty()) {
    ImGui::Separator();
    for (const auto& src : st.tl.sources) ImGui::TextWrapped("source: %s", src.c_str());
  }
  ImGui::EndChild();
}

void draw_status(const AppState& st, std::uint64_t frames) {
  std::size_t connected = 0;
  std::uint64_t drops = 0;
  for (const auto& rd : st.tl.ranks) {
    connected += rd.connected;
    drops += rd.dropped;
  }
  std::string line = fmt::format("events {}  ranks {}", st.tl.event_count, st.tl.ranks.size());
  if (!st.live_status.empty()) line += fmt::format(" (connected {})  {}", connected, st.live_status);
  line += fmt::format("  drops {}  marks {}  view {}  frame {:.2f} ms (build {:.2f} ms CPU)  #{}", drops, st.drawn_marks,
                      format_time(st.view_t1 - st.view_t0), st.frame_ms, st.build_cpu_ms, frames);
  if (st.load_progress >= 0) line += fmt::format("  loading {:.0f}% {}", st.load_progress * 100, st.loading_file);
  ImGui::TextUnformatted(line.c_str());
}

}  // namespace memcomm::view
