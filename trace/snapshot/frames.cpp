// memory_viz's frame filter and format over interned stacks (frames.hpp).
#include "memcomm/snapshot/frames.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>

namespace memcomm::snapshot {

bool is_user_frame(std::string_view function, std::string_view filename) {
  // The lists of memory_viz's _frame_filter (torch 2.11): substrings of the function name and of
  // the file name whose frames it omits.
  static constexpr std::array<std::string_view, 8> kOmitFunctions = {
      "unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start", "__libc_start_main",
      "PyEval_",        "PyObject_",                 "PyFunction_"};
  static constexpr std::array<std::string_view, 10> kOmitFiles = {
      "core/boxing",          "/Register",     "/Redispatch",   "pythonrun.c",         "Modules/main.c",
      "Objects/call.c", "Objects/methodobject.c", "pycore_ceval.h", "ceval.c", "cpython/abstract.h"};
  for (std::string_view f : kOmitFunctions)
    if (function.find(f) != std::string_view::npos) return false;
  for (std::string_view f : kOmitFiles)
    if (filename.find(f) != std::string_view::npos) return false;
  return true;
}

std::string frame_text(const Snapshot& snap, std::uint32_t frame_id) {
  const Frame& f = snap.frame(frame_id);
  std::string_view file = snap.str(f.filename);
  if (const auto slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
  return fmt::format("{}:{}:{}", file, f.line, snap.str(f.name));
}

namespace {
bool has(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

// One frame's verdict (Note [Categories from frames]); Unknown: this frame does not decide.
prof::MemCategory frame_category(std::string_view function, std::string_view file) {
  using C = prof::MemCategory;
  if (function == "zero_grad") return C::Gradient;
  if (has(file, "optim") && (function == "step" || function == "_init_group" || has(function, "_adam") ||
                             has(function, "_sgd")))
    return C::OptimizerState;
  if (has(function, "autograd::Engine") || has(function, "backward")) return C::Gradient;
  if (function == "forward") return C::Activation;
  if (has(file, "modules/module.py") &&
      (function == "_apply" || function == "to" || function == "cuda" || function == "load_state_dict"))
    return C::Parameter;
  if (has(file, "utils/data/")) return C::Input;
  return C::Unknown;
}
}  // namespace

prof::MemCategory category_from_frames(const Snapshot& snap, std::uint32_t stack) {
  if (stack == kNoStack || stack >= snap.stack_count()) return prof::MemCategory::Unknown;
  auto [frames, n] = snap.stack(stack);
  for (std::size_t k = 0; k < n; ++k) {  // innermost first
    const Frame& f = snap.frame(frames[k]);
    std::string file(snap.str(f.filename));
    std::replace(file.begin(), file.end(), '\\', '/');  // Windows paths
    const prof::MemCategory c = frame_category(snap.str(f.name), file);
    if (c != prof::MemCategory::Unknown) return c;
  }
  return prof::MemCategory::Unknown;
}

namespace {
bool is_python_line(std::string_view line) {
  const std::string_view file = line.substr(0, line.find(':'));
  const bool pseudo_file = file.size() >= 2 && file.front() == '<' && file.back() == '>';
  return pseudo_file || (file.size() > 3 && file.substr(file.size() - 3) == ".py");
}
}  // namespace

std::size_t shown_line(const std::vector<std::string>& lines) {
  for (std::size_t k = lines.size(); k-- > 0;)
    if (is_python_line(lines[k])) return k;
  return lines.empty() ? 0 : lines.size() - 1;
}

StackWindow shown_window(const std::vector<std::string>& lines, std::size_t max_lines) {
  StackWindow w;
  w.heading = !lines.empty() && lines[0] == kFreeStackHeading;
  const std::size_t frames_from = w.heading ? 1 : 0;
  w.first = frames_from;
  if (lines.size() <= frames_from || max_lines == 0) return w;
  const std::size_t last = std::max(shown_line(lines), frames_from);
  w.count = std::min(last + 1 - frames_from, max_lines);
  w.first = last + 1 - w.count;
  w.outer = w.first - frames_from;
  w.inner = lines.size() - 1 - last;
  return w;
}

namespace {
constexpr std::uint32_t kUnknown = ~std::uint32_t{0};
constexpr std::uint32_t kFiltered = kUnknown - 1;

// What the constructor interns with: text -> line, lines -> site.
struct SiteInterner {
  std::unordered_map<std::string, std::uint32_t> line_ids;
  std::map<std::vector<std::uint32_t>, std::uint32_t> site_ids;
  std::vector<std::uint32_t>& line_frame;
  std::vector<std::vector<std::uint32_t>>& sites;
  std::uint32_t line(std::string text, std::uint32_t frame) {
    auto [it, fresh] = line_ids.emplace(std::move(text), static_cast<std::uint32_t>(line_frame.size()));
    if (fresh) line_frame.push_back(frame);
    return it->second;
  }
  std::uint32_t site(const std::vector<std::uint32_t>& lines) {
    auto [it, fresh] = site_ids.emplace(lines, static_cast<std::uint32_t>(sites.size()));
    if (fresh) sites.push_back(lines);
    return it->second;
  }
};
}  // namespace

StackText::StackText(const Snapshot& snap) : snap_(&snap) {
  SiteInterner in{{}, {}, line_frame_, sites_};
  non_python_site_ = in.site({in.line(std::string(kNonPython), kNoStack)});
  site_of_stack_.reserve(snap.stack_count());
  std::vector<std::uint32_t> frame_line;  // frame id -> line, kFiltered, or kUnknown (not seen yet)
  std::vector<std::uint32_t> ids;
  for (std::uint32_t s = 0; s < snap.stack_count(); ++s) {
    auto [frames, n] = snap.stack(s);
    ids.clear();
    for (std::size_t k = n; k-- > 0;) {  // stored innermost first; a site is outermost first
      if (frames[k] >= frame_line.size()) frame_line.resize(frames[k] + 1, kUnknown);
      std::uint32_t& line = frame_line[frames[k]];
      if (line == kUnknown) {
        const Frame& f = snap.frame(frames[k]);
        line = is_user_frame(snap.str(f.name), snap.str(f.filename)) ? in.line(frame_text(snap, frames[k]), frames[k]) : kFiltered;
      }
      if (line != kFiltered) ids.push_back(line);
    }
    site_of_stack_.push_back(in.site(ids));
  }
  sites_.shrink_to_fit();
  line_frame_.shrink_to_fit();
}

std::string StackText::line_text(std::uint32_t line) const {
  return line_frame_[line] == kNoStack ? std::string(kNonPython) : frame_text(*snap_, line_frame_[line]);
}

std::vector<std::string> stack_lines(const Snapshot& snap, std::uint32_t stack, bool all_frames) {
  if (stack == kNoStack || stack >= snap.stack_count()) return {};
  auto [frames, n] = snap.stack(stack);
  std::vector<std::string> out;
  out.reserve(n);
  for (std::size_t k = n; k-- > 0;) {  // stored innermost first; shown outermost first
    const Frame& f = snap.frame(frames[k]);
    if (all_frames || is_user_frame(snap.str(f.name), snap.str(f.filename))) out.push_back(frame_text(snap, frames[k]));
  }
  return out;
}

std::string shown_frame(const Snapshot& snap, std::uint32_t stack) {
  std::vector<std::string> lines = stack_lines(snap, stack);
  if (lines.empty()) lines = stack_lines(snap, stack, true);
  return lines.empty() ? std::string() : lines[shown_line(lines)];
}

std::vector<std::string> StackText::lines(std::uint32_t stack, bool all_frames) const {
  if (stack == kNoStack || stack >= snap_->stack_count()) return {std::string(kNonPython)};
  return stack_lines(*snap_, stack, all_frames);
}

std::uint32_t StackText::site(std::uint32_t stack, bool stack_of_free) const {
  const std::uint32_t s = stack < site_of_stack_.size() ? site_of_stack_[stack] : non_python_site_;
  return stack_of_free ? s | kFreeStackSite : s;
}

std::vector<std::string> StackText::site_lines(std::uint32_t site, bool all_frames) const {
  std::vector<std::string> out;
  if (site & kFreeStackSite) out.emplace_back(kFreeStackHeading);
  site &= ~kFreeStackSite;
  if (all_frames) {  // found among the interned stacks (a few hundred), not the allocations
    for (std::uint32_t stack = 0; stack < snap_->stack_count(); ++stack) {
      if (this->site(stack) != site) continue;
      std::vector<std::string> frames = lines(stack, true);
      out.insert(out.end(), frames.begin(), frames.end());
      return out;
    }
  }
  for (std::uint32_t id : sites_[site]) out.push_back(line_text(id));
  return out;
}

bool StackText::site_matches(std::uint32_t site, std::string_view needle) const {
  for (std::uint32_t id : sites_[site & ~kFreeStackSite])
    if (line_text(id).find(needle) != std::string::npos) return true;
  return false;
}

std::size_t StackText::memory_bytes() const {
  std::size_t n = site_of_stack_.capacity() * 4 + line_frame_.capacity() * 4 + sites_.capacity() * sizeof(sites_[0]);
  for (const auto& s : sites_) n += s.capacity() * 4;
  return n;
}

}  // namespace memcomm::snapshot
