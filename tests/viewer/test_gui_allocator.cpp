// The allocator pane with an expandable segment (Note [Virtual reservations]): reserved shows the
// mapped bytes, the virtual reservation is shown apart, and the bar spans what is mapped, with the
// unmapped hole drawn as such, not a 128 GiB bar with invisible blocks.
#include "gui_fixture.hpp"

#include <memcomm/view/builder.hpp>

using namespace gui_test;
using namespace memcomm::view;
using memcomm::prof::EventKind;
namespace pal = memcomm::view::palette;

TEST_CASE("allocator pane: an expandable segment shows mapped bytes as reserved", "[gui][viewer]") {
  auto app = make_app(900, 300, "allocator");
  AppState& st = app->state();
  const std::uint64_t MiB = 1ull << 20, base = 0x7f0000000000ull;
  TimelineBuilder b;
  b.alloc_event(0, {0, base, 128ull << 30, 0, EventKind::SegmentAlloc});  // the virtual reservation
  b.alloc_event(0, {10, base, 512 * MiB, 0, EventKind::SegmentMap});
  b.alloc_event(0, {20, base + 768 * MiB, 512 * MiB, 0, EventKind::SegmentMap});
  b.alloc_event(0, {30, base, 256 * MiB, 0, EventKind::Alloc});
  b.alloc_event(0, {40, base + 768 * MiB, 256 * MiB, 0, EventKind::Alloc});
  st.set_timeline(b.finish("expandable"), false);
  st.alloc_follow_cursor = false;
  st.alloc_time = 100;
  frames(*app, 3);
  CHECK(st.alloc_status.reserved == 1024 * MiB);
  CHECK(st.alloc_status.virtual_reserved == (128ull << 30));
  CHECK(st.alloc_status.allocated == 512 * MiB);
  Image img = grab(*app, "allocator_expandable.png");
  const double alloc_px = img.count(0, 0, img.w, img.h, pal::kBlockAllocated);
  const double free_px = img.count(0, 0, img.w, img.h, pal::kSegmentFree);
  const double hole_px = img.count(0, 0, img.w, img.h, pal::kSegmentUnmapped);
  REQUIRE(alloc_px > 0);
  // The bar spans [base, base + 1280 MiB): 512 MiB allocated, 512 MiB mapped and free, a 256 MiB hole.
  const double all = alloc_px + free_px + hole_px;
  CHECK(alloc_px / all == Approx(0.4).margin(0.03));
  CHECK(free_px / all == Approx(0.4).margin(0.03));
  CHECK(hole_px / all == Approx(0.2).margin(0.03));
  // The memory curve's "reserved" tops out at the mapped bytes too.
  const CounterSeries* reserved = st.tl.ranks.at(0).counter("reserved");
  REQUIRE(reserved != nullptr);
  CHECK(reserved->global_max() == static_cast<double>(1024 * MiB));
}
