// What the views share: the model, the visible time range, cursor, selection, hover, messages.
// The views (timeline_view.cpp, memory_view.cpp, ...) read and update it; App owns it.
#pragma once

#include <memcomm/view/app/advice.hpp>
#include <memcomm/view/allocation_layout.hpp>
#include <memcomm/view/allocation_tip.hpp>
#include <memcomm/view/allocator_state.hpp>
#include <memcomm/view/analysis.hpp>
#include <memcomm/view/builder.hpp>
#include <memcomm/view/timeline.hpp>

#include <memcomm/common/bytes.hpp>  // memcomm::format_bytes: every byte figure the views print

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace memcomm::view {

struct Panes {
  bool timeline = true, memory = true, allocator = true, steps = true, summary = true;
  bool allocations = false;  // the allocation timeline and "who holds memory" (snapshots, View menu, --panes)
};
// --panes: a comma list of timeline, memory, allocator, steps, summary, allocations ("" = the default:
// all but allocations, which App::show_allocations_for_stacks adds for snapshots). False with a
// message naming the first unknown (or empty) name, and the valid ones.
bool parse_panes(const std::string& list, Panes& out, std::string& error);

// One node of the "who holds memory" tree: a frame path's bytes and its children by label.
struct HolderNode {
  std::string label;
  std::uint64_t bytes = 0;
  std::uint32_t count = 0;
  std::map<std::string, std::size_t> children;  // label -> index in the tree
};

struct AppState {
  Timeline tl;                                  // everything loaded
  std::vector<std::unique_ptr<AllocatorTimeline>> alloc;  // per rank slot (Note [Incremental allocator state])
  std::vector<StepRow> steps;                   // step table, recomputed on load
  TimeNs steps_time = 0, steps_exposed = 0, steps_wait = 0;  // sums over `steps` (the summary's advice), kept with it
  Summary summary;                              // recomputed on load
  std::vector<prof::Phase> name_phase;          // phase per string id (no string compares per frame)

  // Time axis shared by the timeline and memory panes.
  TimeNs view_t0 = 0, view_t1 = 1;
  float label_width = 130;                      // px left of the time axis in both panes
  bool cursor_valid = false;
  TimeNs cursor = 0;                            // time under the mouse in a time pane
  bool alloc_follow_cursor = true;              // the allocator pane tracks the cursor
  TimeNs alloc_time = 0;                        // allocator pane time (scrub bar)
  int memory_rank = 0;                          // rank slot the memory/allocator panes show

  // Allocation timeline and "who holds memory" (allocation_view.cpp, holders_view.cpp).
  int pinned_alloc = -1;                        // index in pinned_rank's allocations (-1: none)
  int pinned_rank = -1;
  TimeNs pinned_t0 = 0, pinned_t1 = 0;          // its lifetime, marked on every time pane (draw_overlays)
  std::uint64_t pinned_addr = 0;                // found again by (pinned_t0, pinned_addr) after a rebuild,
  std::uint32_t pinned_rank_id = 0;             // on the rank of this id (live ranks join in rank order)
  bool all_frames = false;                      // tooltips show every frame (memory_viz's filter off)
  char alloc_search[128] = {};                  // file or function names in stacks
  std::string alloc_search_applied;
  int alloc_search_rank = -1;
  std::uint64_t alloc_search_generation = ~0ull;
  std::vector<bool> site_match;                 // per StackText site of the memory rank
  std::uint64_t alloc_search_hits = 0;          // bands drawn that match, last frame
  AllocationLayout alloc_layout;                // last frame's bands (Note [Allocation bands])
  LayoutRequest alloc_layout_req;               // what alloc_layout was laid out for, with the rank
  int alloc_layout_rank = -1;                   // and the data generation: an equal frame reuses it
  std::uint64_t alloc_layout_generation = ~0ull;
  bool has_hovered_alloc = false;               // the last hovered allocation, for --report-json
  AllocationTip hovered_alloc;
  HoldersAt holders, holders_peak;              // at alloc_time and at the peak, for memory_rank
  TimeNs holders_time = 0;                      // alloc_time `holders` was computed for
  int holders_rank = -1, peak_rank = -1;        // memory_rank they were computed for
  std::uint64_t holders_generation = ~0ull, peak_generation = ~0ull;
  prof::LivePeak alloc_peak;                    // prof::peak_live of the memory rank
  std::vector<HolderNode> holders_tree;         // `holders` as a prefix tree of frames (holders_view.cpp)
  TimeNs holders_seen_time = 0;                 // the followed cursor's last time, and the frames it
  int holders_still_frames = 0;                 // has rested there (the fold waits for it to rest)
  int compare_rank = -1;                        // the rank whose end state the memory rank's is compared with
  std::vector<snapshot::SiteChange> comparison; // compare_holders(compare_rank's end, memory_rank's end)
  struct ComparisonOf {                         // what `comparison` was computed for
    std::uint64_t generation = ~0ull;
    int before = -1, after = -1;
    bool operator==(const ComparisonOf& o) const { return generation == o.generation && before == o.before && after == o.after; }
  } comparison_of;
  // alloc_peak and holders_peak for the memory rank, recomputed when the rank or data change.
  void refresh_peak();
  float alloc_x0 = 0, alloc_y0 = 0, alloc_y1 = 0;  // allocation plot area (left edge = column 0)
  double alloc_ymax = 0;                        // bytes at alloc_y0

  // Range selection (right-drag, or shift + left-drag).
  bool selecting = false, has_selection = false;
  TimeNs sel_t0 = 0, sel_t1 = 0;
  RangeStats selection;

  // Search.
  char search[128] = {};
  std::string search_applied;
  std::vector<bool> search_match;               // per string id
  std::uint64_t search_hits = 0;

  std::vector<bool> collapsed;                  // per rank slot
  Panes panes;

  // Hover results of the last frame (for --report-json and tests).
  std::string tooltip;                          // text of the tooltip shown this frame ("" none)
  std::vector<std::string> tooltips_seen;       // distinct tooltips in order (capped)
  std::uint64_t drawn_marks = 0;                // spans + merged marks drawn last frame

  // Geometry of the last frame in window pixels, so scripts and tests can aim at things.
  struct RowLayout {
    int slot;    // rank slot
    int lane;    // lane index in RankData::lanes, -1 for the rank header
    int row;     // row (depth) in the lane
    float y;     // top of the row
    float h;     // height
  };
  std::vector<RowLayout> layout;                // timeline rows on screen
  float time_x0 = 0, time_x1 = 0;               // time axis of the timeline and memory panes
  float timeline_content_h = 0;                 // the timeline's lanes' height as last drawn (Note [Pane heights])
  float mem_y0 = 0, mem_y1 = 0;                 // memory plot area
  double mem_ymax = 0;                          // value at mem_y0
  float step_row0_y = -1;                       // centre of the first step-table row drawn
  struct Point {
    float x = -1, y = -1;                       // centre of a widget; y < 0: not drawn last frame
  };
  Point file_menu, open_item;                   // the File menu's title; File > Open... while the menu is open
  Point search_box;                             // the toolbar's search field
  Point range_from, range_to, range_load;       // the large-file prompt's fields and its "Load range" button
  Point alloc_search_box, all_frames_box, peak_button;  // the allocation and holders panes' controls
  Point advice_button;                          // the Summary's "Run memcomm-trace advise" (large traces)
  std::uint64_t links_drawn = 0;                // matched-collective links drawn last frame
  std::string status_line;                      // the status line's text
  struct AllocStatus {
    std::uint64_t reserved = 0, virtual_reserved = 0, allocated = 0;  // bytes
  } alloc_status;                               // what the allocator pane showed last frame

  // Summary pane: the advisor over the loaded traces (Note [Advice in a child process]) and the
  // tuner's probes, recomputed when the data changes (tune_events), not per frame.
  AdviceResult advice;
  bool advice_requested = false;                // the pane's "run the advisor" button (large traces)
  std::vector<TuneProbe> tune;
  std::uint32_t tune_rank = 0;
  std::uint64_t tune_events = ~0ull;            // tl.event_count `tune` was computed for
  std::uint64_t tune_generation = ~0ull;        // data_generation `tune` was computed for
  std::uint64_t data_generation = 0;            // bumped by set_timeline: an equal-size load is new data too

  // Messages shown in the UI (and printed to stderr when added).
  std::vector<std::string> messages;
  void message(const std::string& m);

  // Loading / live.
  double load_progress = -1;                    // < 0: not loading
  std::string loading_file;
  std::string live_status;                      // live mode line for the status bar
  double frame_ms = 0, build_ms = 0;            // last frame: total and UI build (wall clock)
  double build_cpu_ms = 0;                      // last frame: UI build, CPU time of the UI thread
  double publish_cpu_ms = 0;                    // last live publish (append + indexes), CPU ms; 0: none yet
  double allocations_cpu_ms = 0;                // last live rebuild of the lifetimes (Note [Live allocations])
  std::uint64_t allocations_rebuilds = 0;       // ... and how many there were

  // Replaces (or, with merge, extends) the data and rebuilds what depends on it.
  void set_timeline(Timeline&& t, bool merge);
  // After events were appended to tl in place (live, Note [Live rebuild]): updates what depends
  // on them from what changed, never by walking all events.
  void appended(const AppendResult& r, bool refresh_summary = true);
  // After the ranks' allocation lifetimes were rebuilt in place (Note [Live allocations]): the
  // bands, holders and peak follow; a pinned allocation stays pinned if it is still there.
  void allocations_rebuilt();
  // The pinned allocation's rank slot, found by its id (ranks that join sort in): false, and unpinned,
  // when that rank is gone or nothing is pinned.
  bool follow_pinned_rank();
  void sum_steps();  // steps_time, steps_exposed, steps_wait from `steps`: per change, not per frame
  void zoom_to(TimeNs t0, TimeNs t1);           // clamps and keeps a minimum width
  void zoom_at(TimeNs at, double factor);       // factor < 1 zooms in around `at`
  void pan(TimeNs dt);
  void apply_search();
  void note_tooltip(const std::string& text);
};

// "12.345 ms", "830 ns", "1.2 s".
std::string format_time(TimeNs ns);

}  // namespace memcomm::view
