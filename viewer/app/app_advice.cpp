// App: starts the advisor over the loaded traces after each load and takes its answer
// (Note [Advice in a child process] in advice.hpp).
#include <memcomm/view/app/app.hpp>

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>

#include <algorithm>
#include <filesystem>

namespace memcomm::view {

void App::update_advice() {
  if (opt_.bench) return;  // the sweep times frames, not a child process beside them
  using State = AdviceResult::State;
  if (live_published_) {
    advice_job_.reset();
    st_.advice = AdviceResult();
    st_.advice.state = State::Live;
    return;
  }
  const std::vector<std::string> files = loaded_trace_files(opened_paths_, st_.tl.sources);
  const bool asked = st_.advice_requested && st_.advice.state == State::Waiting;
  if (!asked && !files.empty() && files == st_.advice.files &&
      (st_.advice.state == State::Running || st_.advice.state == State::Done || st_.advice.state == State::Waiting))
    return;  // nothing new among the traces (e.g. a snapshot was added)
  advice_job_.reset();
  st_.advice = AdviceResult();
  st_.advice.files = files;
  if (files.empty()) {
    st_.advice.state = st_.tl.empty() ? State::None : State::NoTraces;
    return;
  }
  std::uint64_t bytes = 0;
  for (const auto& f : files) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(f, ec);
    if (!ec) bytes += n;
  }
  if (bytes >= opt_.range_prompt_bytes && !st_.advice_requested) {  // the pane offers a button
    st_.advice.state = State::Waiting;
    return;
  }
  st_.advice_requested = false;
  st_.advice.tool = find_trace_tool(opt_.trace_tool);
  if (st_.advice.tool.empty()) {
    st_.advice.state = State::Failed;
    st_.advice.error = "memcomm-trace was not found next to memcomm-view or on PATH; build it (target memcomm-trace) "
                       "or run `memcomm-trace advise` on the traces yourself";
    return;
  }
  st_.advice.state = State::Running;
  advice_job_ = std::make_unique<AdviceJob>(st_.advice.tool, files, [] { glfwPostEmptyEvent(); });
}

void App::poll_advice() {
  if (st_.advice_requested && st_.advice.state == AdviceResult::State::Waiting) update_advice();
  if (!advice_job_ || !advice_job_->done()) return;
  st_.advice = advice_job_->take();
  advice_job_.reset();
  redraw_frames_ = std::max(redraw_frames_, 2);
}

}  // namespace memcomm::view
