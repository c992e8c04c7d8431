// A stack as PyTorch's memory_viz prints it (memcomm/snapshot/frames.hpp has its filter and format):
// "file_basename:line:function" per frame, innermost first, without the frames that are machinery
// (the unwinder, the interpreter's eval loop, dispatcher boxing). memcomm-trace advise names the
// failed allocation in the words a PyTorch user already reads in memory_viz. One difference: the
// advice is one line, so when the stack has Python frames (a line number; C++ unwinder frames have
// line 0) only those are listed, and the C++ frames before them are counted: the allocator's and
// the dispatcher's internals say nothing about which of the user's tensors did not fit.
#include <fmt/format.h>

#include "memcomm/snapshot/frames.hpp"
#include "snapshot_rules.hpp"

namespace memcomm::advise::detail {

std::string oom_stack_text(const snapshot::Snapshot& snap, std::uint32_t stack, std::size_t max_frames) {
  if (stack == snapshot::kNoStack) return "no stack recorded (record_memory_history(stacks=\"all\") records it)";
  const auto [frames, count] = snap.stack(stack);
  bool python = false;
  for (std::size_t i = 0; i < count && !python; ++i) python = snap.frame(frames[i]).line > 0;
  std::string out;
  std::size_t kept = 0, hidden = 0, native = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const snapshot::Frame& f = snap.frame(frames[i]);
    if (!snapshot::is_user_frame(snap.str(f.name), snap.str(f.filename))) continue;
    if (python && f.line <= 0) {
      ++native;
      continue;
    }
    if (kept == max_frames) {
      ++hidden;
      continue;
    }
    out += (kept++ ? " <- " : "") + snapshot::frame_text(snap, frames[i]);
  }
  if (hidden) out += fmt::format(" <- ... {} more", hidden);
  if (native) out += fmt::format(" ({} C++ frames not shown)", native);
  return out.empty() ? "no frames left after memory_viz's filter" : out;
}

}  // namespace memcomm::advise::detail
