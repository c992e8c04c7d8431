// The expandable arena's placement policy, called directly (allocator/core/expandable_arena.hpp):
// Note [Window choice] and Note [Map ahead] in allocator/core/expandable.cpp.
#include "expandable_arena.hpp"

#include "allocator_test_util.hpp"

using namespace memcomm::alloc;
using namespace memcomm::alloc::test;

namespace {
constexpr std::uintptr_t kBase = 0x100000000;
}  // namespace

TEST_CASE("window choice: a window that needs no mapping beats a cheaper-looking one that does",
          "[allocator][arena]") {
  // A 4 MiB mapped free block, then (after a live block) an unmapped tail.
  const std::vector<FreeRange> free = {{kBase, 4 * MiB, true}, {kBase + 8 * MiB, 64 * MiB, false}};
  const WindowDecision d = choose_window(free, 3 * MiB, kPage);
  REQUIRE(d.found);
  CHECK(d.start == kBase);
  CHECK(d.need == 0);
  CHECK(d.pieces == 0);
  CHECK(d.first == 0);
  CHECK(d.run == 4 * MiB);
}

TEST_CASE("window choice: fewer map calls win before fewer bytes", "[allocator][arena]") {
  // Run 1: unmapped 2 MiB | mapped 2 MiB | unmapped 2 MiB (6 MiB needs two calls, 4 MiB of pages).
  // Run 2 (after a gap): mapped 1 MiB | unmapped 16 MiB (one call, 6 MiB of pages).
  const std::vector<FreeRange> free = {{kBase, 2 * MiB, false},
                                       {kBase + 2 * MiB, 2 * MiB, true},
                                       {kBase + 4 * MiB, 2 * MiB, false},
                                       {kBase + 10 * MiB, 1 * MiB, true},
                                       {kBase + 11 * MiB, 16 * MiB, false}};
  const WindowDecision d = choose_window(free, 6 * MiB, kPage);
  REQUIRE(d.found);
  CHECK(d.pieces == 1);
  CHECK(d.start == kBase + 10 * MiB);  // starts at the mapped block: it saves a page of mapping
  CHECK(d.first == 3);
  CHECK(d.need == 6 * MiB);  // [11, 16) MiB of the unmapped block, rounded out to pages [10, 16)
}

TEST_CASE("window choice: the unmap the page budget would force counts as a call", "[allocator][arena]") {
  // Run 1: unmapped 2 MiB | mapped 4 MiB | unmapped 2 MiB (8 MiB: two map calls, 4 MiB of pages).
  // Run 2 (after a gap): unmapped 64 MiB (one map call, 8 MiB of pages).
  const std::vector<FreeRange> free = {{kBase, 2 * MiB, false},
                                       {kBase + 2 * MiB, 4 * MiB, true},
                                       {kBase + 6 * MiB, 2 * MiB, false},
                                       {kBase + 16 * MiB, 64 * MiB, false}};
  const WindowDecision roomy = choose_window(free, 8 * MiB, kPage);  // the budget takes nothing back
  REQUIRE(roomy.found);
  CHECK(roomy.start == kBase + 16 * MiB);
  CHECK(roomy.pieces == 1);
  // With 6 MiB of headroom the fresh window costs a map and an unmap, as many calls as run 1's two
  // maps, and run 1 maps fewer bytes (Note [Window choice]).
  const WindowDecision tight = choose_window(free, 8 * MiB, kPage, 6 * MiB);
  REQUIRE(tight.found);
  CHECK(tight.start == kBase);
  CHECK(tight.pieces == 2);
  CHECK(tight.need == 4 * MiB);
}

TEST_CASE("window choice: among equal costs the smaller run, then the lower address", "[allocator][arena]") {
  const std::vector<FreeRange> free = {{kBase, 8 * MiB, true}, {kBase + 16 * MiB, 4 * MiB, true},
                                       {kBase + 32 * MiB, 4 * MiB, true}};
  const WindowDecision d = choose_window(free, 4 * MiB, kPage);
  REQUIRE(d.found);
  CHECK(d.run == 4 * MiB);
  CHECK(d.start == kBase + 16 * MiB);
  CHECK(d.first == 1);
}

TEST_CASE("window choice: a window may span touching ranges, and nothing fits when no run holds it",
          "[allocator][arena]") {
  const std::vector<FreeRange> free = {{kBase, 2 * MiB, true}, {kBase + 2 * MiB, 2 * MiB, false},
                                       {kBase + 8 * MiB, 2 * MiB, false}};
  const WindowDecision d = choose_window(free, 3 * MiB, kPage);
  REQUIRE(d.found);
  CHECK(d.start == kBase);
  CHECK(d.pieces == 1);
  CHECK(d.need == 2 * MiB);
  CHECK_FALSE(choose_window(free, 5 * MiB, kPage).found);
  CHECK_FALSE(choose_window({}, 1, kPage).found);
}

TEST_CASE("map-ahead fills the room's share, within the small pool's limit and the chunk minimum",
          "[allocator][arena]") {
  MapAheadInputs in;
  in.page = kPage;
  in.room = 9.5 * double(MiB);
  CHECK(map_ahead_bytes(in) == 8 * MiB);  // the whole room, in pages
  in.map_ahead = 0.5;
  CHECK(map_ahead_bytes(in) == 4 * MiB);  // half of it, rounded down to a page
  in.map_ahead = 1.0;
  in.most_ahead = 2 * MiB;
  CHECK(map_ahead_bytes(in) == 2 * MiB);
  in.chunk = 20 * MiB;
  in.mapped_now = 14 * MiB;
  CHECK(map_ahead_bytes(in) == 6 * MiB);  // the rest of the chunk, within the room
  in.room = 3 * double(MiB);
  CHECK(map_ahead_bytes(in) == 2 * MiB);  // never past the room
  in.room = -double(MiB);
  CHECK(map_ahead_bytes(in) == 0);
}

TEST_CASE("in a trough, map-ahead and the chunk minimum stay within the trough room", "[allocator][arena]") {
  MapAheadInputs in;  // Note [Map-ahead in a trough]
  in.page = kPage;
  in.room = 40 * double(MiB);
  in.map_ahead = 0.125;
  in.chunk = 20 * MiB;
  in.mapped_now = 2 * MiB;
  CHECK(map_ahead_bytes(in) == 18 * MiB);  // no trough: the rest of the chunk, more than the room's share
  in.trough_room = 5 * double(MiB);
  CHECK(map_ahead_bytes(in) == 4 * MiB);   // up to the high water, in whole pages
  in.trough_room = -double(MiB);           // the growth's own pages already pass it
  CHECK(map_ahead_bytes(in) == 0);
}
