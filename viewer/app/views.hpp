// The panes of memcomm-view. Each draws into the current ImGui window region it is given and
// reads/updates AppState. Per-frame work in each is O(what is visible) (Note [Span merging],
// Note [Counter LOD], Note [Incremental allocator state]).
#pragma once

#include <memcomm/view/app/app_state.hpp>

#include <imgui.h>

namespace memcomm::view {

// Maps time to pixels over a canvas [x0, x1) for the visible range of AppState.
struct TimeAxis {
  float x0 = 0, x1 = 1;
  TimeNs t0 = 0, t1 = 1;
  double ns_per_px = 1;
  TimeAxis(const AppState& st, float left, float right)
      : x0(left), x1(right), t0(st.view_t0), t1(st.view_t1),
        ns_per_px(static_cast<double>(st.view_t1 - st.view_t0) / std::max(1.0f, right - left)) {}
  float x(TimeNs t) const { return x0 + static_cast<float>(static_cast<double>(t - t0) / ns_per_px); }
  TimeNs t(float px) const { return t0 + static_cast<TimeNs>((px - x0) * ns_per_px); }
};

// Wheel zoom around the mouse, left-drag pan, right-drag (or shift + left-drag) range selection,
// and the cursor, for a time pane whose canvas is [min, max] and hovered when `hovered`.
void handle_time_input(AppState& st, const TimeAxis& axis, ImVec2 min, ImVec2 max, bool hovered);
// W/S zoom and A/D pan around the centre (Tracy's keys), when no text field has focus.
void handle_time_keys(AppState& st, float canvas_width);
// Ruler with 1-2-5 ticks, relative to the start of the data.
void draw_ruler(const AppState& st, const TimeAxis& axis, ImDrawList* dl, float y, float h);
// Selection band and cursor line across [y0, y1].
void draw_overlays(const AppState& st, const TimeAxis& axis, ImDrawList* dl, float y0, float y1);

// Centre of the last ImGui item (AppState's widget positions for scripts and tests).
AppState::Point item_centre();
// A point inside the text field of the last InputFloat/InputInt (its group ends with +/- buttons).
AppState::Point item_text_field();

void draw_timeline(AppState& st, ImVec2 size);
void draw_memory(AppState& st, ImVec2 size);
void draw_allocator(AppState& st, ImVec2 size);
void draw_allocations(AppState& st, ImVec2 size);
void draw_holders(AppState& st, ImVec2 size);
void draw_steps(AppState& st, ImVec2 size);
void draw_summary(AppState& st, ImVec2 size);
void draw_status(AppState& st, std::uint64_t frames);  // also keeps the line in st.status_line

}  // namespace memcomm::view
