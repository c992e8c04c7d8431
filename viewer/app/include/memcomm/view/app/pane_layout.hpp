// The heights of the main window's panes, from the window's height (no ImGui here: unit-tested).
#pragma once

#include <memcomm/view/app/app_state.hpp>

namespace memcomm::view {

// Note [Pane heights]
// The panes stack top to bottom: timeline, memory, allocator, allocations, and the step table beside
// the Summary. Each pane but the timeline has a height it is drawn well at (memory 190 px, allocator
// 170, allocations 260, steps and Summary 190). Fixed heights overflowed small windows: at 1280x720
// the step table and Summary ran off the bottom and the status line went with them. And on large
// ones the timeline took all that was left, two thirds of it empty for a two-rank run and all of it
// for a snapshot (which has no spans), while the step table and the "who holds memory" tree scrolled.
// So:
// - a memory or allocator pane with nothing to show (a trace that records no memory) is one line
//   (kLinePane) that says so;
// - the panes' heights and the gaps between them never exceed the window: where they would, every
//   pane but the timeline shrinks in proportion, down to kMinPane, and the timeline to kMinTimeline;
// - the timeline takes what its lanes need (its content, once drawn) and no more, up to what is left,
//   and what is left beyond that goes to the panes that list things (steps and Summary, allocations),
//   in proportion to their heights; with none of them shown, to the timeline after all.
// What the panes have to show, where it decides their heights.
struct PaneContent {
  float timeline = 0;     // the timeline's lanes' height as last drawn (0: not known yet)
  bool memory = true;     // some rank records memory (else the memory pane is a line saying so)
  bool allocator = true;  // some rank records allocator events (else the allocator pane is a line saying so)
};

struct PaneHeights {
  float timeline = 0, memory = 0, allocator = 0, allocations = 0, bottom = 0;  // bottom: steps and Summary
};

inline constexpr float kMinPane = 60, kMinTimeline = 120, kLinePane = 44;

// `avail`: the height for the panes and the gap after each.
PaneHeights pane_heights(const Panes& shown, float avail, float spacing, const PaneContent& content);

}  // namespace memcomm::view
