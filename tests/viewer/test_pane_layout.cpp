// See Note [Pane heights]: the panes fit the window at every size, and space goes where there is
// something to show.
#include <catch2/catch.hpp>

#include <memcomm/view/app/pane_layout.hpp>

using memcomm::view::Panes;
using memcomm::view::pane_heights;
using memcomm::view::PaneHeights;

namespace {
float total(const PaneHeights& h) { return h.timeline + h.memory + h.allocator + h.allocations + h.bottom; }
}  // namespace

TEST_CASE("pane heights: every pane fits a small window, the timeline keeps its minimum", "[unit][viewer]") {
  const Panes all;  // timeline, memory, allocator, steps, summary
  const float spacing = 4;
  for (float avail : {380.0f, 500.0f, 620.0f, 700.0f}) {  // 1280x720 leaves about 620 px below the toolbar
    INFO("avail " << avail);
    const PaneHeights h = pane_heights(all, avail, spacing, {400});
    CHECK(total(h) + 4 * spacing <= Approx(avail).margin(0.01));
    CHECK(h.timeline >= memcomm::view::kMinTimeline);
    CHECK(h.bottom >= memcomm::view::kMinPane);
    CHECK(h.memory >= memcomm::view::kMinPane);
  }
  Panes snapshot = all;
  snapshot.allocations = true;
  const PaneHeights s = pane_heights(snapshot, 800, spacing, {60});
  CHECK(total(s) + 5 * spacing == Approx(800));
}

TEST_CASE("pane heights: a large window's spare height goes to the lists, not an empty timeline", "[unit][viewer]") {
  const Panes all;
  const PaneHeights h = pane_heights(all, 1340, 4, {300});  // 2560x1440, a two-rank run's 300 px of lanes
  CHECK(h.timeline == Approx(300));
  CHECK(h.bottom > 190);
  CHECK(h.memory == 190);  // the curves keep their height
  CHECK(total(h) + 4 * 4 == Approx(1340));
  // Content not measured yet (the first frame): the timeline takes what is left, as before.
  CHECK(pane_heights(all, 1340, 4, {0}).bottom == 190);
  // Many ranks: the timeline takes all it can and the lists keep their own heights.
  const PaneHeights many = pane_heights(all, 1340, 4, {5000});
  CHECK(many.bottom == 190);
  CHECK(many.timeline == Approx(1340 - 16 - 190 - 170 - 190));
}

TEST_CASE("pane heights: a pane alone takes the window", "[unit][viewer]") {
  Panes only{false, false, false, false, false, false};
  only.allocations = true;
  CHECK(pane_heights(only, 900, 4, {0}).allocations == Approx(896));
  Panes summary{false, false, false, false, true, false};
  CHECK(pane_heights(summary, 900, 4, {0}).bottom == Approx(896));
  Panes memory{false, true, false, false, false, false};
  CHECK(pane_heights(memory, 900, 4, {0}).memory == Approx(896));
  Panes timeline{true, false, false, false, false, false};
  CHECK(pane_heights(timeline, 900, 4, {200}).timeline == Approx(896));
}

TEST_CASE("pane heights: memory and allocator panes with nothing to show are a line each", "[unit][viewer]") {
  const memcomm::view::PaneContent no_memory{5000, false, false};  // a torch.profiler trace without profile_memory
  const PaneHeights h = pane_heights(Panes{}, 1340, 4, no_memory);
  CHECK(h.memory == memcomm::view::kLinePane);
  CHECK(h.allocator == memcomm::view::kLinePane);
  CHECK(h.timeline == Approx(1340 - 16 - 2 * memcomm::view::kLinePane - 190));
}
