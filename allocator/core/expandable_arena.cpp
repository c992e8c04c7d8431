// The expandable arena's placement policy (expandable_arena.hpp): for every run of touching free ranges
// that holds the request, each range's start and end are tried as the window's start or end and ranked
// by mapping cost; map-ahead clamps a share of the page budget's headroom between the pool's limits.

#include "expandable_arena.hpp"

#include <algorithm>

namespace memcomm::alloc {

namespace {

bool better(const WindowDecision& c, const WindowDecision& best, std::size_t headroom) {
  if (!best.found) return true;
  // (see Note [Window choice]) A window that needs no mapping wins; among windows that do, fewer source
  // calls win before fewer bytes, since the page budget bounds the bytes anyway: a map call per unmapped
  // piece, and an unmap when the window needs more than the budget's headroom.
  if ((c.need == 0) != (best.need == 0)) return c.need == 0;
  const std::size_t calls_c = c.pieces + (c.need > headroom), calls_b = best.pieces + (best.need > headroom);
  if (calls_c != calls_b) return calls_c < calls_b;
  if (c.need != best.need) return c.need < best.need;
  if (c.run != best.run) return c.run < best.run;
  return c.start < best.start;
}

// The cost of placing `size` bytes at `start` inside a run that ends at free[last]; free[from] is the
// range that holds `start`. Ranges are in address order, so only those the window overlaps are visited
// (summing over the whole run for every candidate made the choice quadratic in the run's length).
WindowDecision evaluate(const std::vector<FreeRange>& free, std::size_t from, std::size_t last, std::size_t run,
                        std::uintptr_t start, std::size_t size, std::size_t page) {
  WindowDecision c;
  c.found = true;
  c.start = start;
  c.run = run;
  c.first = from;
  for (std::size_t i = from; i <= last && free[i].addr < start + size; ++i) {
    const FreeRange& r = free[i];
    if (r.mapped) continue;
    const std::uintptr_t lo = std::max(r.addr, start), hi = std::min(r.addr + r.size, start + size);
    c.need += page_up(hi, page) - page_down(lo, page);
    c.pieces++;
  }
  return c;
}

}  // namespace

WindowDecision choose_window(const std::vector<FreeRange>& free, std::size_t size, std::size_t page,
                             std::size_t headroom) {
  WindowDecision best;
  for (std::size_t first = 0; first < free.size();) {
    std::size_t last = first;
    std::size_t run = free[first].size;
    while (last + 1 < free.size() && free[last].addr + free[last].size == free[last + 1].addr) run += free[++last].size;
    const std::uintptr_t run_start = free[first].addr, run_end = free[last].addr + free[last].size;
    if (run >= size) {
      for (std::size_t i = first; i <= last; ++i) {
        const FreeRange& r = free[i];
        if (r.addr + size <= run_end) {
          const WindowDecision c = evaluate(free, i, last, run, r.addr, size, page);
          if (better(c, best, headroom)) best = c;
        }
        if (r.addr + r.size >= run_start + size) {
          const std::uintptr_t start = r.addr + r.size - size;
          std::size_t from = i;
          while (from > first && free[from].addr > start) --from;
          const WindowDecision c = evaluate(free, from, last, run, start, size, page);
          if (better(c, best, headroom)) best = c;
        }
      }
    }
    first = last + 1;
  }
  return best;
}

std::size_t map_ahead_bytes(const MapAheadInputs& in) {
  const std::size_t page = in.page;
  const double room = std::min(in.room, in.trough_room);
  std::size_t ahead = room > 0 ? page_down(std::size_t(in.map_ahead * room), page) : 0;
  ahead = std::min(ahead, in.most_ahead);
  if (in.chunk > in.mapped_now) ahead = std::max(ahead, page_up(in.chunk - in.mapped_now, page));
  if (room < double(ahead)) ahead = room > 0 ? page_down(std::size_t(room), page) : 0;
  return ahead;
}

}  // namespace memcomm::alloc
