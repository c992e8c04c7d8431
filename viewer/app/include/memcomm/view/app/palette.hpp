// The viewer's colours, in one place so that screenshot tests can look for them.
#pragma once

#include <memcomm/view/timeline.hpp>

#include <cstdint>

namespace memcomm::view::palette {

struct Rgb {
  std::uint8_t r, g, b;
  constexpr std::uint32_t imgui() const {  // IM_COL32 layout (ABGR), opaque
    return 0xFF000000u | (std::uint32_t(b) << 16) | (std::uint32_t(g) << 8) | r;
  }
};

inline constexpr Rgb kKernel{70, 130, 220};
inline constexpr Rgb kMemcpy{230, 200, 40};
inline constexpr Rgb kMemset{240, 140, 30};
inline constexpr Rgb kCollective{160, 90, 220};
inline constexpr Rgb kStraggler{235, 50, 50};
inline constexpr Rgb kNvtx{60, 180, 170};
inline constexpr Rgb kLink{200, 160, 255};  // a matched collective to its instance on the next rank
inline constexpr Rgb kMerged{128, 128, 128};  // darkening factor applies to the lane colour instead
// Phase spans by prof::Phase, the phase their name says (prof::phase_from_name).
inline constexpr Rgb kPhase[] = {
    {140, 140, 140}, // custom: a range whose name is no phase
    {90, 90, 110},   // step
    {110, 110, 130}, // micro-step
    {80, 170, 90},   // forward
    {200, 110, 60},  // backward
    {190, 170, 60},  // optimizer
    {200, 70, 120},  // data-wait
    {100, 150, 200}, // eval
    {120, 130, 90},  // checkpoint
    {160, 90, 220},  // comm: a blocking communication call, as the collectives lane colours it
    {60, 180, 170},  // annotation: drawn on its thread's lane, as kNvtx colours it
};
static_assert(sizeof(kPhase) / sizeof(kPhase[0]) == static_cast<std::size_t>(prof::Phase::Count),
              "one colour per prof::Phase");
// Memory pane.
inline constexpr Rgb kAllocated{60, 160, 90};
inline constexpr Rgb kReserved{50, 70, 110};
inline constexpr Rgb kActive{230, 230, 90};
inline constexpr Rgb kLargestFree{120, 200, 240};
inline constexpr Rgb kOom{255, 40, 40};
// Per-category allocated curves, indexed as kMemCategoryNames (allocator_state.hpp).
inline constexpr Rgb kCategory[] = {{150, 150, 150}, {240, 120, 200}, {250, 160, 60}, {180, 120, 250},
                                    {90, 220, 200},  {200, 200, 200}, {255, 90, 90},  {120, 180, 255}};
// Allocator state pane.
inline constexpr Rgb kBlockAllocated{60, 160, 90};
inline constexpr Rgb kBlockPending{230, 150, 40};
inline constexpr Rgb kSegmentFree{70, 70, 80};
inline constexpr Rgb kSegmentUnmapped{35, 35, 42};  // expandable segment: reserved address space, not backed
inline constexpr Rgb kSelection{255, 255, 255};

inline Rgb lane_colour(LaneKind kind, prof::Phase phase = prof::Phase::Custom) {
  switch (kind) {
    case LaneKind::Phase: return kPhase[static_cast<int>(phase)];
    case LaneKind::Kernel: return kKernel;
    case LaneKind::Memcpy: return kMemcpy;
    case LaneKind::Memset: return kMemset;
    case LaneKind::Collective: return kCollective;
    case LaneKind::Nvtx: return kNvtx;
  }
  return kMerged;
}

// Merged marks (Note [Span merging]) use the lane colour at 60%.
inline constexpr Rgb darken(Rgb c) {
  return {std::uint8_t(c.r * 6 / 10), std::uint8_t(c.g * 6 / 10), std::uint8_t(c.b * 6 / 10)};
}

}  // namespace memcomm::view::palette
