// A stack as PyTorch's memory_viz prints it (torch/cuda/_memory_viz.py: _frame_fmt, _frame_filter):
// "file_basename:line:function" per frame, innermost first, without the frames that are machinery
// (the unwinder, the interpreter's eval loop, dispatcher boxing). memcomm-trace advise names the
// failed allocation in the words a PyTorch user already reads in memory_viz. One difference: the
// advice is one line, so when the stack has Python frames (a line number; C++ unwinder frames have
// line 0) only those are listed, and the C++ frames before them are counted: the allocator's and
// the dispatcher's internals say nothing about which of the user's tensors did not fit.
// TODO(frames.hpp): a private copy until memcomm/snapshot/frames.hpp (the shared formatter, being
// written beside this) is merged; then call that and delete this file.
#include <fmt/format.h>

#include <array>
#include <string_view>

#include "snapshot_rules.hpp"

namespace memcomm::advise::detail {

namespace {

// _frame_filter's lists, verbatim (torch 2.x).
constexpr std::array<std::string_view, 8> kOmitFunctions = {
    "unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start", "__libc_start_main",
    "PyEval_",        "PyObject_",                 "PyFunction_"};
constexpr std::array<std::string_view, 10> kOmitFilenames = {
    "core/boxing",    "/Register",      "/Redispatch",          "pythonrun.c",        "Modules/main.c", "Objects/call.c",
    "Objects/methodobject.c", "pycore_ceval.h", "ceval.c", "cpython/abstract.h"};

bool shown(std::string_view name, std::string_view file) {
  for (auto f : kOmitFunctions)
    if (name.find(f) != std::string_view::npos) return false;
  for (auto f : kOmitFilenames)
    if (file.find(f) != std::string_view::npos) return false;
  return true;
}

std::string frame_text(const snapshot::Snapshot& snap, const snapshot::Frame& f) {
  std::string_view file = snap.str(f.filename);
  if (const auto slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
  return fmt::format("{}:{}:{}", file, f.line, snap.str(f.name));
}

}  // namespace

std::string oom_stack_text(const snapshot::Snapshot& snap, std::uint32_t stack, std::size_t max_frames) {
  if (stack == snapshot::kNoStack) return "no stack recorded (record_memory_history(stacks=\"all\") records it)";
  const auto [frames, count] = snap.stack(stack);
  bool python = false;
  for (std::size_t i = 0; i < count && !python; ++i) python = snap.frame(frames[i]).line > 0;
  std::string out;
  std::size_t kept = 0, hidden = 0, native = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const snapshot::Frame& f = snap.frame(frames[i]);
    if (!shown(snap.str(f.name), snap.str(f.filename))) continue;
    if (python && f.line <= 0) {
      ++native;
      continue;
    }
    if (kept == max_frames) {
      ++hidden;
      continue;
    }
    out += (kept++ ? " <- " : "") + frame_text(snap, f);
  }
  if (hidden) out += fmt::format(" <- ... {} more", hidden);
  if (native) out += fmt::format(" ({} C++ frames not shown)", native);
  return out.empty() ? "no frames left after memory_viz's filter" : out;
}

}  // namespace memcomm::advise::detail
