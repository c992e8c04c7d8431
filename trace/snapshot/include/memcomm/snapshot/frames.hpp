// Stacks as memory_viz shows them: PyTorch's torch/cuda/_memory_viz.py formats a frame as
// "file_basename:line:function" (_frame_fmt) and drops the frames of the interpreter and of the
// unwinder (_frame_filter), so a stack starts at user code. StackText does the same over a
// snapshot's interned stacks, once per distinct stack, so every consumer (memcomm-trace memory and
// compare, the viewer's tooltips and flame graph) prints the same lines.
//
// Note [Sites]: memory_viz folds live bytes by the text of the filtered stack. Two raw stacks that
// differ only in dropped frames, or in directories, are one site. StackText gives every raw stack a
// site id: equal ids exactly when the filtered texts are equal. A stack with no frames (kNoStack:
// the event carried none or an empty list) is the site "<non-python>", as in memory_viz; a stack
// whose frames are all filtered away is the empty site, as memory_viz prints it (an empty path).
//
// Note [Categories from frames]: a snapshot names no tensor's role, but its stacks say where an
// allocation was made. category_from_frames() reads the frames, innermost first, and takes the
// first that decides: the optimizer's step or zero_grad (optimizer state and its temporaries;
// gradients for zero_grad), the autograd engine or a backward call (gradients), a module's
// forward (activations), a module's _apply/to/cuda/load_state_dict (parameters), a DataLoader
// (input). Innermost first, because the nearest role wins: a training loop's frames are outside
// everything, an optimizer step's inside it, and a forward recomputed inside a checkpointed
// backward makes activations again. It is a guess, shown as one ("from frames"); a stack that
// matches nothing stays unknown rather than forced into a class.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memcomm/snapshot/snapshot.hpp"
#include "memcomm/trace/event.hpp"

namespace memcomm::snapshot {

inline constexpr std::string_view kNonPython = "<non-python>";
// Note [A free's stack] (memcomm/trace/allocations.hpp): a site id with kFreeStackSite set is a site
// of stacks that frees recorded, for blocks allocated before the trace; its lines start with
// kFreeStackHeading (memory_viz's "alloc not recorded, stack trace for free").
inline constexpr std::uint32_t kFreeStackSite = 1u << 31;
inline constexpr std::string_view kFreeStackHeading = "<allocated before the trace; the stack of its free:>";
// A site of blocks from before the trace that no stack names (a torch.profiler trace's, a viewer cell's).
inline constexpr std::string_view kBeforeTraceSite = "<allocated before the trace>";

// memory_viz's _frame_filter: false for interpreter, dispatcher and unwinder frames.
bool is_user_frame(std::string_view function, std::string_view filename);
// memory_viz's _frame_fmt (short file name): "basename:line:function".
std::string frame_text(const Snapshot& snap, std::uint32_t frame_id);

// Note [Categories from frames]. MemCategory::Unknown for kNoStack and for stacks that match nothing.
prof::MemCategory category_from_frames(const Snapshot& snap, std::uint32_t stack);

// Note [The line a stack is shown by]
// A stack recorded with its C++ frames (_record_memory_history(stacks="all"), context "all") ends
// in a dozen or more frames of the dispatcher, ATen's empty_* and the caching allocator, alike for
// every allocation: shown by its innermost lines, every site reads
// CUDACachingAllocator.cpp:0:...::malloc and the call that allocated is cut off among the outer
// frames. So a stack that holds Python frames is shown by its innermost Python frame (the user's
// call: linear.py:125:forward), with the native frames inside it counted, not listed; a stack
// without one (a C++ program's, or Python frames only) is shown by its innermost line. A line is
// Python's when its file (the text before the first ':') ends in .py or is a <...> pseudo-file
// (<string>, <frozen runpy>, a notebook cell). Text, not frames, so that stacks of two files
// (compare) and the JSON's lines are read alike. Every printer takes its window from here.
//
// The index in `lines` (outermost first, memory_viz's "file:line:function") of the line that shows
// the stack; 0 for no lines.
std::size_t shown_line(const std::vector<std::string>& lines);
// The lines a display of at most `max_lines` shows: `count` from `first`, ending at shown_line();
// `outer` lines before them and `inner` (native) lines after them are left out. A leading
// kFreeStackHeading line is no frame: never in the window, `heading` says it is there (the printer
// shows it whatever is cut).
struct StackWindow {
  std::size_t first = 0, count = 0, outer = 0, inner = 0;
  bool heading = false;
};
StackWindow shown_window(const std::vector<std::string>& lines, std::size_t max_lines);
// The stack's lines, outermost first: memory_viz's filtered frames, or every frame with all_frames;
// none for kNoStack.
std::vector<std::string> stack_lines(const Snapshot& snap, std::uint32_t stack, bool all_frames = false);
// The one line that shows the stack (shown_line() of its filtered lines; of all its frames when the
// filter leaves none): an event's site in `memory --events`. "" for kNoStack.
std::string shown_frame(const Snapshot& snap, std::uint32_t stack);

class StackText {
 public:
  explicit StackText(const Snapshot& snap);
  // The stack's lines, outermost first: filtered (memory_viz) unless all_frames; ["<non-python>"]
  // for kNoStack.
  std::vector<std::string> lines(std::uint32_t stack, bool all_frames = false) const;
  // See Note [Sites]: the site of a raw stack id (kNoStack included); with stack_of_free, flagged
  // kFreeStackSite.
  std::uint32_t site(std::uint32_t stack, bool stack_of_free = false) const;
  // The lines of a site, outermost first: filtered, or with all_frames the frames of one of its raw
  // stacks (all raw stacks of a site agree on the filtered frames, so any one is honest about the
  // rest). A kFreeStackSite site's start with kFreeStackHeading.
  std::vector<std::string> site_lines(std::uint32_t site, bool all_frames = false) const;
  std::size_t site_count() const { return sites_.size(); }
  // Whether any filtered line of the stack (or its site) contains `needle` (case-sensitive).
  bool site_matches(std::uint32_t site, std::string_view needle) const;
  std::size_t memory_bytes() const;

 private:
  // A line is kept as one frame that prints it, a site as its line ids, and the text is made when
  // asked for: a viewer keeps a StackText per open file beside the Snapshot's own strings, so it
  // adds a few bytes per distinct frame and stack (issue 18: frames kept and cheap). The maps
  // from text to line and from lines to site live only while the constructor runs.
  std::string line_text(std::uint32_t line) const;
  const Snapshot* snap_;
  std::vector<std::uint32_t> site_of_stack_;         // raw stack id -> site
  std::uint32_t non_python_site_ = 0;
  std::vector<std::uint32_t> line_frame_;            // line -> a frame printing it (kNoStack: "<non-python>")
  std::vector<std::vector<std::uint32_t>> sites_;    // site -> its lines, outermost first
};

}  // namespace memcomm::snapshot
