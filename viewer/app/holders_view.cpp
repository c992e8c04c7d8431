// "Who holds memory" (issue 18): the live bytes of the memory rank by stack at the allocator
// pane's time (st.alloc_time, which follows the cursor), as a tree of frames outermost first, a
// button that moves that time to the peak of live bytes, and the top sites at the peak. The figures
// are the model's holders_at (snapshot::memory_at: what `memcomm-trace memory` prints), recomputed
// only when the time, the rank or the data change, and while following the cursor only once it rests.
// With two ranks that have stacks (two snapshots, or two devices), it also compares the memory
// rank's end state with another's: what grew by stack (compare_holders, `memcomm-trace compare`).
#include "views.hpp"

#include <fmt/format.h>
#include <memcomm/snapshot/frames.hpp>

#include <algorithm>
#include <map>

namespace memcomm::view {
namespace {

constexpr std::size_t kPeakRows = 10;
using Node = HolderNode;

// A prefix tree of the sites' stacks: a node per distinct frame path, with the bytes under it.
std::vector<Node> stack_tree(const HoldersAt& h) {
  std::vector<Node> tree(1);
  tree[0].label = "all";
  for (const HoldersAt::Site& s : h.sites) {
    std::size_t at = 0;
    tree[0].bytes += s.bytes;
    tree[0].count += s.count;
    for (const std::string& line : s.stack) {
      auto [it, fresh] = tree[at].children.emplace(line.empty() ? "(empty)" : line, tree.size());
      if (fresh) tree.push_back(Node{it->first, 0, 0, {}});
      at = it->second;
      tree[at].bytes += s.bytes;
      tree[at].count += s.count;
    }
  }
  return tree;
}

void draw_node(const std::vector<Node>& tree, std::size_t i, int depth) {
  const Node& n = tree[i];
  std::vector<std::size_t> kids;
  for (const auto& [label, k] : n.children) kids.push_back(k);
  std::sort(kids.begin(), kids.end(), [&](std::size_t a, std::size_t b) { return tree[a].bytes > tree[b].bytes; });
  const std::string text = fmt::format("{}  {} ({} allocations)", format_bytes(n.bytes), n.label, n.count);
  const ImGuiTreeNodeFlags flags = kids.empty() ? ImGuiTreeNodeFlags_Leaf : (depth < 2 ? ImGuiTreeNodeFlags_DefaultOpen : 0);
  if (ImGui::TreeNodeEx(reinterpret_cast<void*>(i), flags, "%s", text.c_str())) {
    for (std::size_t k : kids) draw_node(tree, k, depth + 1);
    ImGui::TreePop();
  }
}

// While the time follows a moving cursor, the fold (O(allocations)) waits until the cursor rests
// for kRestFrames frames, so browsing stays at the layout's cost; a time set on purpose (the peak
// button, the scrub bar) is folded at once. The pane names the time its figures are for.
constexpr int kRestFrames = 3;

bool cursor_resting(AppState& st) {
  if (!st.alloc_follow_cursor) return true;
  if (st.alloc_time != st.holders_seen_time) {
    st.holders_seen_time = st.alloc_time;
    st.holders_still_frames = 0;
  }
  return ++st.holders_still_frames >= kRestFrames;
}

void refresh_holders(AppState& st, const RankData& rd) {
  const bool fresh = st.holders_rank == st.memory_rank && st.holders_generation == st.data_generation;
  if (fresh && (st.holders_time == st.alloc_time || !cursor_resting(st))) return;
  st.holders_rank = st.memory_rank;
  st.holders_generation = st.data_generation;
  st.holders_time = st.alloc_time;
  st.holders = holders_at(rd, st.alloc_time);
  st.holders_tree = stack_tree(st.holders);
}

// A time on the timeline; before its first event, the blocks from before the trace (an end-state
// snapshot, whose trace holds no event, has only those).
std::string holders_time(const AppState& st, TimeNs t) {
  const TimeNs since = bounded_time(t) - st.tl.time_zero();
  return since < 0 ? std::string("the start (blocks from before the trace)") : format_time(since);
}

// A three-column table of sites whose last column is the line that shows the stack (Note [The line a
// stack is shown by] in memcomm/snapshot/frames.hpp); false: not shown.
bool begin_site_table(const char* id, const char* first, const char* second) {
  if (!ImGui::BeginTable(id, 3, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp)) return false;
  ImGui::TableSetupColumn(first);
  ImGui::TableSetupColumn(second);
  ImGui::TableSetupColumn("site (the call that allocated)");
  ImGui::TableHeadersRow();
  return true;
}

// The line a site's cell shows (Note [The line a stack is shown by]); a block from before the trace
// is shown by its free's stack (Note [A free's stack]), which says so, not as the call that allocated.
std::string site_cell(const std::vector<std::string>& stack) {
  const snapshot::StackWindow w = snapshot::shown_window(stack, 1);
  const std::string before(snapshot::kBeforeTraceSite);
  if (w.count == 0) return w.heading ? before : std::string("(empty)");
  return w.heading ? before + " freed at " + stack[w.first] : stack[w.first];
}

void peak_table(const AppState& st) {
  if (!begin_site_table("peaksites", "bytes at the peak", "allocations")) return;
  for (std::size_t k = 0; k < std::min(kPeakRows, st.holders_peak.sites.size()); ++k) {
    const HoldersAt::Site& s = st.holders_peak.sites[k];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(format_bytes(s.bytes).c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%u", s.count);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(site_cell(s.stack).c_str());
  }
  ImGui::EndTable();
}

// The ranks with stacks other than the memory rank, for the compare combo.
std::vector<int> comparable_ranks(const AppState& st) {
  std::vector<int> out;
  for (std::size_t r = 0; r < st.tl.ranks.size(); ++r)
    if (st.tl.ranks[r].stacks && static_cast<int>(r) != st.memory_rank) out.push_back(static_cast<int>(r));
  return out;
}

void refresh_comparison(AppState& st) {
  const AppState::ComparisonOf of{st.data_generation, st.compare_rank, st.memory_rank};
  if (st.comparison_of == of) return;
  st.comparison_of = of;
  st.comparison.clear();
  if (st.compare_rank < 0 || st.compare_rank >= static_cast<int>(st.tl.ranks.size())) return;
  const RankData& before = st.tl.ranks[static_cast<std::size_t>(st.compare_rank)];
  const RankData& after = st.tl.ranks[static_cast<std::size_t>(st.memory_rank)];
  st.comparison = compare_holders(holders_at(before, before.allocations.end), holders_at(after, after.allocations.end));
}

void comparison_table(const AppState& st) {
  if (!begin_site_table("comparison", "change", "before -> after")) return;
  std::size_t shown = 0;
  for (const snapshot::SiteChange& c : st.comparison) {
    if (c.delta() == 0 || shown++ == kPeakRows) continue;
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    const std::uint64_t size = static_cast<std::uint64_t>(c.delta() > 0 ? c.delta() : -c.delta());
    ImGui::Text("%c%s", c.delta() > 0 ? '+' : '-', format_bytes(size).c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%s -> %s", format_bytes(c.before).c_str(), format_bytes(c.after).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(site_cell(c.stack).c_str());
  }
  ImGui::EndTable();
}

// "compare end state with": a combo of the other ranks with stacks, and what grew.
void draw_comparison(AppState& st) {
  const std::vector<int> others = comparable_ranks(st);
  if (others.empty() || !st.tl.ranks[static_cast<std::size_t>(st.memory_rank)].stacks) return;
  ImGui::Separator();
  const auto name = [&](int r) {
    if (r < 0) return std::string("(nothing)");
    const RankData& rd = st.tl.ranks[static_cast<std::size_t>(r)];
    return rd.host.empty() ? rank_name(rd) : fmt::format("{} ({})", rank_name(rd), rd.host);
  };
  if (ImGui::BeginCombo("compare end state with", name(st.compare_rank).c_str())) {
    if (ImGui::Selectable(name(-1).c_str(), st.compare_rank < 0)) st.compare_rank = -1;
    for (int r : others)
      if (ImGui::Selectable(name(r).c_str(), st.compare_rank == r)) st.compare_rank = r;
    ImGui::EndCombo();
  }
  refresh_comparison(st);
  if (st.compare_rank >= 0) comparison_table(st);
}

}  // namespace

void draw_holders(AppState& st, ImVec2 size) {
  ImGui::BeginChild("holders", size, true);
  if (st.tl.ranks.empty()) {
    ImGui::EndChild();
    return;
  }
  const RankData& rd = st.tl.ranks[static_cast<std::size_t>(st.memory_rank)];
  if (st.alloc_follow_cursor && st.cursor_valid) st.alloc_time = st.cursor;  // as the allocator pane's scrub bar
  st.refresh_peak();
  if (ImGui::Button("peak")) {
    st.alloc_time = bounded_time(st.alloc_peak.t);  // the panes subtract it (Note [Bounded timestamps])
    st.alloc_follow_cursor = false;
  }
  st.peak_button = item_centre();
  if (st.holders_rank != st.memory_rank || st.holders_generation != st.data_generation) st.holders_tree.clear();
  refresh_holders(st, rd);
  ImGui::SameLine();
  ImGui::Text("who holds memory at %s: %s", holders_time(st, st.holders.at_ns).c_str(),
              format_bytes(st.holders.live_bytes).c_str());
  if (!st.holders_tree.empty()) draw_node(st.holders_tree, 0, 0);
  ImGui::Separator();
  ImGui::Text("top sites at the peak (%s at %s)", format_bytes(st.alloc_peak.bytes).c_str(),
              holders_time(st, st.alloc_peak.t).c_str());
  peak_table(st);
  draw_comparison(st);
  ImGui::EndChild();
}

}  // namespace memcomm::view
