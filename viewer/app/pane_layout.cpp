// See Note [Pane heights] in pane_layout.hpp.
#include <memcomm/view/app/pane_layout.hpp>

#include <algorithm>

namespace memcomm::view {

namespace {
// Each fixed pane's height, `scale` times its own, no lower than kMinPane (0 where not shown); a pane
// with nothing to show is a line.
PaneHeights fixed(const Panes& p, const PaneContent& c, float scale) {
  const auto h = [scale](bool on, float want) { return on ? std::max(kMinPane, want * scale) : 0.0f; };
  PaneHeights out;
  out.memory = c.memory ? h(p.memory, 190) : p.memory ? kLinePane : 0;
  out.allocator = c.allocator ? h(p.allocator, 170) : p.allocator ? kLinePane : 0;
  out.allocations = h(p.allocations, 260);
  out.bottom = h(p.steps || p.summary, 190);
  return out;
}

float fixed_sum(const PaneHeights& h) { return h.memory + h.allocator + h.allocations + h.bottom; }
}  // namespace

PaneHeights pane_heights(const Panes& p, float avail, float spacing, const PaneContent& content) {
  const bool bottom = p.steps || p.summary;
  const int rows = int(p.timeline) + int(p.memory) + int(p.allocator) + int(p.allocations) + int(bottom);
  const float space = std::max(0.0f, avail - float(rows) * spacing);
  const float timeline_min = p.timeline ? kMinTimeline : 0;
  PaneHeights h = fixed(p, content, 1);
  if (fixed_sum(h) + timeline_min > space && fixed_sum(h) > 0)
    h = fixed(p, content, std::max(0.0f, space - timeline_min) / fixed_sum(h));
  float left = std::max(0.0f, space - fixed_sum(h));
  if (p.timeline) {
    const float wanted = content.timeline > 0 ? std::max(kMinTimeline, content.timeline) : left;
    h.timeline = std::max(kMinTimeline, std::min(left, wanted));
    left = std::max(0.0f, left - h.timeline);
  }
  const float growers = h.bottom + h.allocations;
  if (growers > 0) {
    const float share = left / growers;
    h.bottom += h.bottom * share;
    h.allocations += h.allocations * share;
  } else if (p.timeline) {
    h.timeline += left;
  } else {
    h.memory += p.memory ? left : 0;  // memory and allocator alone: the memory curve grows
    if (!p.memory) h.allocator += left;
  }
  return h;
}

}  // namespace memcomm::view
