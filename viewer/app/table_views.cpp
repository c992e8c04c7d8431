// Step table (click a row to zoom to that step), summary with the advisor's advice and the
// tuner's probes, and the status line.
#include "views.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace memcomm::view {

void draw_steps(AppState& st, ImVec2 size) {
  ImGui::BeginChild("steps", size, true, ImGuiWindowFlags_NoMove);
  ImGui::Text("Steps (%zu)", st.steps.size());
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_Resizable;
  if (ImGui::BeginTable("steps_table", 9, flags)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    // Weights by what a column holds ("607.312 ms" against "0"): equal ones cut times off at 1600 px.
    const std::pair<const char*, float> columns[] = {{"rank", 0.5f},    {"step", 0.6f},      {"time", 1.2f},
                                                     {"comm", 1.2f},    {"exposed", 1.2f},   {"overlap", 0.8f},
                                                     {"data-wait", 1.2f}, {"peak alloc", 1.1f}, {"start", 1.2f}};
    for (const auto& [h, weight] : columns) ImGui::TableSetupColumn(h, ImGuiTableColumnFlags_WidthStretch, weight);
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
        ImGui::Text("%llu", static_cast<unsigned long long>(r.step));
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
        ImGui::TextUnformatted(r.memory_recorded ? format_bytes(whole_bytes(r.peak_allocated)).c_str() : "-");
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(r.start - st.tl.time_zero()).c_str());
      }
    }
    ImGui::EndTable();
  }
  ImGui::EndChild();
}

namespace {

// The advisor's answer (Note [Advice in a child process] in advice.hpp).
void draw_advice(AppState& st) {
  using State = AdviceResult::State;
  const AdviceResult& a = st.advice;
  st.advice_button = AppState::Point{};
  if (a.state == State::None) return;
  ImGui::Separator();
  switch (a.state) {
    case State::None: break;
    case State::NoTraces:
      ImGui::TextWrapped("Advice: needs traces (.mct or torch.profiler .json/.json.gz) or PyTorch memory snapshots "
                         "(.pickle); none of what is loaded is one.");
      break;
    case State::Live:
      ImGui::TextWrapped("Advice: live streams are not kept as files; record the run with --trace and run "
                         "`memcomm-trace advise` on its traces, or open them here.");
      break;
    case State::Waiting:
      ImGui::TextWrapped("Advice: %zu trace(s) too large to analyse at once (the tool reads them again).", a.files.size());
      if (ImGui::Button("Run memcomm-trace advise")) st.advice_requested = true;
      st.advice_button = item_centre();
      break;
    case State::Running:
      ImGui::TextWrapped("Advice: running memcomm-trace advise on %zu trace(s)...", a.files.size());
      break;
    case State::Failed:
      ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "Advice unavailable:");
      ImGui::TextWrapped("%s", a.error.c_str());
      break;
    case State::Done: {
      ImGui::Text("Advice (memcomm-trace advise, %zu file(s), whole files):", a.files.size());
      if (a.advice.empty()) ImGui::TextUnformatted("  nothing to change: no rule's threshold is crossed");
      int n = 0;
      for (const auto& it : a.advice) {
        ImGui::TextWrapped("%d. [%s] %s", ++n, it.topic.c_str(), it.change.c_str());
        ImGui::Indent();
        ImGui::TextWrapped("evidence: %s", it.evidence.c_str());
        if (it.saving > 0 && !it.saving_text.empty()) ImGui::Text("expected saving: %s", it.saving_text.c_str());
        ImGui::Unindent();
      }
      // The analysis tables are monospaced text: ImGui's default font keeps their columns.
      if (!a.report.empty() && ImGui::TreeNode("Analysis (memcomm-trace report)")) {
        ImGui::TextUnformatted(a.report.c_str(), a.report.c_str() + a.report.size());
        ImGui::TreePop();
      }
      break;
    }
  }
}

// memcomm-tune's probes from the trace's tune.* counters, when there are any.
void draw_tune(AppState& st) {
  if (st.tune_events != st.tl.event_count || st.tune_generation != st.data_generation) {  // per change of the data
    st.tune_events = st.tl.event_count;
    st.tune_generation = st.data_generation;
    st.tune = tune_probes(st.tl, st.tune_rank);
  }
  if (st.tune.empty()) return;
  ImGui::Separator();
  ImGui::Text("Tuner probes (tune.* counters, rank %u): %zu", st.tune_rank, st.tune.size());
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_SizingStretchProp;
  if (!ImGui::BeginTable("tune_table", 4, flags)) return;
  for (const char* h : {"micro-batch", "result", "peak reserved", "step"}) ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  for (const TuneProbe& p : st.tune) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("%.0f", p.micro_batch);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(p.oom ? "OOM" : "fits");
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(p.peak_reserved >= 0 ? format_bytes(whole_bytes(p.peak_reserved)).c_str() : "-");
    ImGui::TableNextColumn();
    if (p.step_ms >= 0) ImGui::Text("%.2f ms", p.step_ms);
    else ImGui::TextUnformatted("-");
  }
  ImGui::EndTable();
}

}  // namespace

void draw_summary(AppState& st, ImVec2 size) {
  ImGui::BeginChild("summary", size, true, ImGuiWindowFlags_NoMove);
  const Summary& s = st.summary;
  ImGui::TextUnformatted("Summary");
  ImGui::Text("ranks %zu  duration %s", st.tl.ranks.size(), format_time(s.duration).c_str());
  ImGui::Text("spans %llu  collectives %llu  samples %llu  allocator events %llu", static_cast<unsigned long long>(s.spans),
              static_cast<unsigned long long>(s.collectives), static_cast<unsigned long long>(s.samples),
              static_cast<unsigned long long>(s.alloc_events));
  // A run that records no memory has unknown peaks, not 0 B ones (memcomm-trace report's '-').
  const auto peak = [&](double bytes) { return s.memory_recorded ? format_bytes(whole_bytes(bytes)) : std::string("-"); };
  ImGui::Text("peak allocated %s  peak reserved %s  OOMs %llu  drops %llu", peak(s.peak_allocated).c_str(),
              peak(s.peak_reserved).c_str(), static_cast<unsigned long long>(s.ooms), static_cast<unsigned long long>(s.dropped));
  const std::string busbw = s.collectives == 0 ? "none" : s.busbw_known ? fmt::format("{:.2f} GB/s", s.mean_busbw)
                                                                      : "unknown (no collective records its size)";
  ImGui::Text("mean busbw %s  max skew %s", busbw.c_str(), format_time(s.max_skew).c_str());
  if (s.disagreeing > 0)  // as memcomm-trace report warns of them
    ImGui::TextWrapped("%llu collectives the ranks disagree on (op or size): left out of bandwidth, skew and stragglers",
                       static_cast<unsigned long long>(s.disagreeing));
  std::string strag;
  for (const auto& [rank, times] : s.stragglers) strag += fmt::format(" rank {}: {}x", rank, times);
  if (!strag.empty()) ImGui::Text("last to arrive:%s", strag.c_str());
  // The viewer's own sums (live too); what to change comes from the advisor below.
  const TimeNs step_sum = st.steps_time, exposed = st.steps_exposed, wait = st.steps_wait;
  if (step_sum > 0)
    ImGui::Text("exposed communication %.1f%% of step time, data-wait %.1f%%",
                100.0 * static_cast<double>(exposed) / static_cast<double>(step_sum),
                100.0 * static_cast<double>(wait) / static_cast<double>(step_sum));
  if (s.peak_reserved > 0 && s.peak_allocated > 0)
    ImGui::Text("reserved %.0f%% above allocated at peak", 100.0 * (s.peak_reserved / s.peak_allocated - 1));
  // A selection's figures come first, where a right-drag shows them without scrolling past the advice.
  if (st.has_selection) {
    const RangeStats& r = st.selection;
    ImGui::Separator();
    ImGui::Text("Selection %s .. %s (%s)", format_time(r.t0 - st.tl.time_zero()).c_str(), format_time(r.t1 - st.tl.time_zero()).c_str(),
                format_time(r.t1 - r.t0).c_str());
    ImGui::Text("spans %llu  collectives %llu (%s)", static_cast<unsigned long long>(r.spans),
                static_cast<unsigned long long>(r.collectives), format_bytes(r.collective_bytes).c_str());
    ImGui::Text("busy, summed over %zu ranks: kernels %s  memcpy %s  collectives %s  phases %s", st.tl.ranks.size(),
                format_time(r.busy[1]).c_str(),
                format_time(r.busy[2]).c_str(), format_time(r.busy[4]).c_str(), format_time(r.busy[0]).c_str());
    if (r.mem_valid) ImGui::Text("allocated %s .. %s", format_bytes(whole_bytes(r.mem_min)).c_str(), format_bytes(whole_bytes(r.mem_max)).c_str());
  }
  draw_advice(st);
  draw_tune(st);
  if (!st.tl.sources.empty()) {
    ImGui::Separator();
    for (const auto& src : st.tl.sources) ImGui::TextWrapped("source: %s", src.c_str());
  }
  ImGui::EndChild();
}

void draw_status(AppState& st, std::uint64_t frames) {
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
  st.status_line = std::move(line);
}

}  // namespace memcomm::view
