// The expandable arena's placement policy as pure functions: where in a pool's virtual range a request
// goes (Note [Window choice]) and how many bytes growth maps with it (Note [Map ahead]). Both live in
// expandable.cpp's notes; the engine (grow_expandable) gathers the inputs under its lock, calls these,
// and then acts on the decision.
//
// Contract: no effects and no allocator state. The same inputs always give the same decision, so the
// policy is unit-tested directly (tests/allocator/test_expandable_arena.cpp) without building a layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace memcomm::alloc {

// Addresses rounded to the source's page (the mapping granularity), down and up.
inline std::uintptr_t page_down(std::uintptr_t a, std::size_t page) { return a / page * page; }
inline std::uintptr_t page_up(std::uintptr_t a, std::size_t page) { return (a + page - 1) / page * page; }

// One free block of an expandable range as the window choice sees it.
struct FreeRange {
  std::uintptr_t addr = 0;  // first byte
  std::size_t size = 0;     // bytes
  bool mapped = false;      // backed by the source; unmapped ranges are page-aligned
};

// Where a request goes: the chosen window and what mapping it costs.
struct WindowDecision {
  bool found = false;       // false: no run of free ranges holds the request (the range is exhausted)
  std::uintptr_t start = 0; // first byte of the request
  std::size_t need = 0;     // bytes to map (whole pages of the unmapped ranges the window overlaps)
  std::size_t pieces = 0;   // map calls: unmapped ranges the window overlaps
  std::size_t run = 0;      // bytes of the run of free ranges the window lies in
  std::size_t first = 0;    // index into `free` of the first range the window overlaps
};

// The window for `size` bytes among `free` (address order; ranges that touch form a run; adjacent
// unmapped ranges never touch). Candidates start at the start or end at the end of a range of a run that
// holds `size`; the best needs no mapping if any does, else the fewest source calls (a map per unmapped
// piece, and one unmap if it needs more than `headroom`, the bytes the page budget lets growth map
// without giving any back), then the fewest bytes to map, then the smallest run, then the lowest address
// (Note [Window choice]).
WindowDecision choose_window(const std::vector<FreeRange>& free, std::size_t size, std::size_t page,
                             std::size_t headroom = std::numeric_limits<std::size_t>::max());

// What growth at the end of an unmapped range may map beyond the window (Note [Map ahead]).
struct MapAheadInputs {
  double room = 0;                  // page-budget bytes left after reserved bytes and the window's pages
  double map_ahead = 1.0;           // config.map_ahead: share of `room` to fill
  std::size_t chunk = 0;            // at least this much mapped by this growth in all (0 = no minimum)
  std::size_t mapped_now = 0;       // bytes this growth maps anyway
  std::size_t most_ahead = std::numeric_limits<std::size_t>::max();  // most map-ahead adds at once: the
                                    // small pool's cap, a ramp's one request (Note [Map-ahead on a ramp])
  double trough_room = std::numeric_limits<double>::infinity();  // most map-ahead may add to reserved
                                                                 // bytes (Note [Map-ahead in a trough])
  std::size_t page = 1;             // granularity
};

// Bytes (a multiple of page) to map beyond the window: a share of the room, at most most_ahead, at
// least what makes `chunk`, and never more than the room or trough_room.
std::size_t map_ahead_bytes(const MapAheadInputs& in);

}  // namespace memcomm::alloc
