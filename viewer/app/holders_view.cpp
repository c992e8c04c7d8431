// "Who holds memory" (issue 18): the live bytes of the memory rank by stack at the allocator
// pane's time (st.alloc_time, which follows the cursor), as a tree of frames outermost first, a
// button that moves that time to the peak of live bytes, and the top sites at the peak. The figures
// are the model's holders_at (snapshot::memory_at: what `memcomm-trace memory` prints), recomputed
// only when the time, the rank or the data change, and while following the cursor only once it rests.
#include "views.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace memcomm::view {
namespace {

constexpr std::size_t kPeakRows = 10;

// A prefix tree of the sites' stacks: a node per distinct frame path, with the bytes under it.
struct Node {
  std::string label;
  std::uint64_t bytes = 0;
  std::uint32_t count = 0;
  std::map<std::string, std::size_t> children;  // label -> index in the tree
};

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

bool cursor_resting(const AppState& st) {
  static TimeNs seen = 0;
  static int still = 0;
  if (!st.alloc_follow_cursor) return true;
  if (st.alloc_time != seen) {
    seen = st.alloc_time;
    still = 0;
  }
  return ++still >= kRestFrames;
}

void refresh_holders(AppState& st, const RankData& rd, std::vector<Node>& tree) {
  const bool fresh = st.holders_rank == st.memory_rank && st.holders_generation == st.data_generation;
  if (fresh && (st.holders_time == st.alloc_time || !cursor_resting(st))) return;
  st.holders_rank = st.memory_rank;
  st.holders_generation = st.data_generation;
  st.holders_time = st.alloc_time;
  st.holders = holders_at(rd, st.alloc_time);
  tree = stack_tree(st.holders);
}

void peak_table(const AppState& st) {
  if (!ImGui::BeginTable("peaksites", 3, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp)) return;
  ImGui::TableSetupColumn("bytes at the peak");
  ImGui::TableSetupColumn("allocations");
  ImGui::TableSetupColumn("site (innermost frame)");
  ImGui::TableHeadersRow();
  for (std::size_t k = 0; k < std::min(kPeakRows, st.holders_peak.sites.size()); ++k) {
    const HoldersAt::Site& s = st.holders_peak.sites[k];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(format_bytes(s.bytes).c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%u", s.count);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(s.stack.empty() ? "(empty)" : s.stack.back().c_str());
  }
  ImGui::EndTable();
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
  static std::vector<Node> tree;
  if (st.holders_rank != st.memory_rank || st.holders_generation != st.data_generation) tree.clear();
  refresh_holders(st, rd, tree);
  ImGui::SameLine();
  ImGui::Text("who holds memory at %s: %s", format_time(bounded_time(st.holders.at_ns) - st.tl.begin).c_str(),
              format_bytes(st.holders.live_bytes).c_str());
  if (!tree.empty()) draw_node(tree, 0, 0);
  ImGui::Separator();
  ImGui::Text("top sites at the peak (%s at %s)", format_bytes(st.alloc_peak.bytes).c_str(),
              format_time(bounded_time(st.alloc_peak.t) - st.tl.begin).c_str());
  peak_table(st);
  ImGui::EndChild();
}

}  // namespace memcomm::view
