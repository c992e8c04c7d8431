// The main window: menu bar, toolbar (search, reset), messages, and the panes laid out top to
// bottom (ImGui 1.86 has no docking: panes are child windows that View toggles), then the status line.
#include <memcomm/view/app/app.hpp>
#include <memcomm/view/app/pane_layout.hpp>

#include "views.hpp"

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>
#include <imgui.h>

#include <algorithm>

namespace memcomm::view {

// Where the last widget is, so that scripts and tests can aim at it.
AppState::Point item_centre() {
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
  return {(a.x + b.x) / 2, (a.y + b.y) / 2};
}

AppState::Point item_text_field() {
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
  return {a.x + 10, (a.y + b.y) / 2};
}

void App::build_ui() {
  st_.cursor_valid = false;
  st_.tooltip.clear();
  ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(io.DisplaySize);
  const ImGuiWindowFlags main_flags = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_MenuBar |
                                     ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoSavedSettings |
                                     ImGuiWindowFlags_NoScrollWithMouse;
  ImGui::Begin("memcomm-view", nullptr, main_flags);
  draw_menu_bar();
  draw_open_popup();
  range_prompt();  // a large file waits for its time range (or "load everything")
  draw_toolbar();
  handle_time_keys(st_, io.DisplaySize.x - st_.label_width);
  draw_panes();
  draw_status(st_, frames_);
  ImGui::End();
}

void App::draw_menu_bar() {
  if (ImGui::BeginMenuBar()) {
    const bool file_open = ImGui::BeginMenu("File");
    st_.file_menu = item_centre();
    st_.open_item = AppState::Point{};
    if (file_open) {
      if (ImGui::MenuItem("Open...")) open_popup_ = true;
      st_.open_item = item_centre();
      if (ImGui::MenuItem("Quit")) glfwSetWindowShouldClose(window_, 1);
      ImGui::EndMenu();
    }
    if (ImGui::BeginMenu("View")) {
      ImGui::MenuItem("Timeline", nullptr, &st_.panes.timeline);
      ImGui::MenuItem("Memory over time", nullptr, &st_.panes.memory);
      ImGui::MenuItem("Allocator state", nullptr, &st_.panes.allocator);
      ImGui::MenuItem("Allocations and who holds memory", nullptr, &st_.panes.allocations);
      ImGui::MenuItem("Step table", nullptr, &st_.panes.steps);
      ImGui::MenuItem("Summary", nullptr, &st_.panes.summary);
      if (ImGui::MenuItem("Reset zoom")) st_.zoom_to(st_.tl.begin, st_.tl.end);
      ImGui::EndMenu();
    }
    if (ImGui::BeginMenu("Help")) {
      ImGui::TextUnformatted("wheel: zoom at the mouse   drag: pan   W/S: zoom   A/D: pan\n"
                             "right-drag or shift+drag: select a range (stats in Summary)\n"
                             "click a rank header: collapse   double-click a span: zoom to it\n"
                             "click a step row: zoom to the step   drop files on the window to open them");
      ImGui::EndMenu();
    }
    ImGui::EndMenuBar();
  }
}

void App::draw_open_popup() {
  if (open_popup_) {
    ImGui::OpenPopup("Open file");
    open_popup_ = false;
  }
  if (ImGui::BeginPopupModal("Open file", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::TextUnformatted("Path of a memcomm trace (.mct), a torch.profiler trace (.json, .json.gz)\n"
                           "or a PyTorch memory snapshot pickle:");
    ImGui::SetNextItemWidth(500);
    if (ImGui::IsWindowAppearing()) ImGui::SetKeyboardFocusHere();  // type the path at once
    const bool enter = ImGui::InputText("##path", open_path_, sizeof open_path_, ImGuiInputTextFlags_EnterReturnsTrue);
    if (ImGui::Button("Open") || enter) {
      start_load({open_path_});
      ImGui::CloseCurrentPopup();
    }
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
    ImGui::EndPopup();
  }
}

// Search, reset, load progress and the last messages.
void App::draw_toolbar() {
  // Toolbar: search and reset.
  ImGui::SetNextItemWidth(220);
  ImGui::InputTextWithHint("##search", "search names", st_.search, sizeof st_.search);
  st_.search_box = item_centre();
  st_.apply_search();
  ImGui::SameLine();
  if (!st_.search_applied.empty()) {
    ImGui::Text("%llu matches", static_cast<unsigned long long>(st_.search_hits));
    ImGui::SameLine();
  }
  if (ImGui::Button("Reset zoom")) st_.zoom_to(st_.tl.begin, st_.tl.end);
  if (st_.load_progress >= 0) {
    ImGui::SameLine();
    ImGui::ProgressBar(static_cast<float>(st_.load_progress), ImVec2(300, 0), "loading");
  }
  if (!st_.messages.empty()) {
    ImGui::SameLine();
    if (ImGui::SmallButton("dismiss")) st_.messages.clear();
    for (std::size_t i = st_.messages.size() > 3 ? st_.messages.size() - 3 : 0; i < st_.messages.size(); ++i)
      ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", st_.messages[i].c_str());
  }
}

// The panes the user keeps open, sized to the window.
void App::draw_panes() {
  const float status_h = ImGui::GetFrameHeightWithSpacing();
  const float width = ImGui::GetContentRegionAvail().x;
  const bool memory = st_.tl.ranks.empty() || std::any_of(st_.tl.ranks.begin(), st_.tl.ranks.end(), records_memory);
  const PaneContent content{st_.timeline_content_h, memory, st_.tl.ranks.empty() || st_.summary.alloc_events > 0};
  const PaneHeights h = pane_heights(st_.panes, ImGui::GetContentRegionAvail().y - status_h, ImGui::GetStyle().ItemSpacing.y,
                                     content);  // Note [Pane heights]
  if (st_.panes.timeline) draw_timeline(st_, ImVec2(width, h.timeline));
  if (st_.panes.memory) draw_memory(st_, ImVec2(width, h.memory));
  if (st_.panes.allocator) draw_allocator(st_, ImVec2(width, h.allocator));
  if (st_.panes.allocations) {
    draw_allocations(st_, ImVec2(width * 0.62f, h.allocations));
    ImGui::SameLine();
    draw_holders(st_, ImVec2(0, h.allocations));
  }
  if (st_.panes.steps) {
    draw_steps(st_, ImVec2(st_.panes.summary ? width * 0.6f : width, h.bottom));
    if (st_.panes.summary) ImGui::SameLine();
  }
  if (st_.panes.summary) draw_summary(st_, ImVec2(st_.panes.steps ? 0 : width, h.bottom));
}

}  // namespace memcomm::view
