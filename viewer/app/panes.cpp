// --panes: which panes to show. Apart from app.cpp (no ImGui or GLFW here) so the command-line
// fuzz target (tests/fuzz/viewer_cli.cmake) can link it without a window system.
#include <memcomm/view/app/app_state.hpp>

#include <sstream>
#include <string>

namespace memcomm::view {

bool parse_panes(const std::string& list, Panes& out, std::string& error) {
  Panes p{false, false, false, false, false, false};
  if (list.empty()) {
    out = Panes{};
    return true;
  }
  std::stringstream ss(list);
  std::string name;
  const auto bad = [&](const std::string& what) {
    error = "--panes: " + what + " in '" + list + "' (expected a comma list of timeline, memory, allocator, steps, summary, allocations)";
    return false;
  };
  while (std::getline(ss, name, ',')) {
    if (name == "timeline") p.timeline = true;
    else if (name == "memory") p.memory = true;
    else if (name == "allocator") p.allocator = true;
    else if (name == "steps") p.steps = true;
    else if (name == "summary") p.summary = true;
    else if (name == "allocations") p.allocations = true;
    else return bad(name.empty() ? std::string("an empty pane name") : "unknown pane '" + name + "'");
  }
  if (list.back() == ',') return bad("an empty pane name");
  out = p;
  return true;
}

}  // namespace memcomm::view
