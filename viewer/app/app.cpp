// App: window, frame, background loading, input scripts; --panes. Live mode and the idle policy are in
// app_live.cpp, the advisor in app_advice.cpp.
#include <memcomm/view/app/app.hpp>
#include <memcomm/trace/mixed_runs.hpp>
#include <memcomm/view/synthetic.hpp>

#include "clock.hpp"
#include "views.hpp"

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>
#include <GL/gl.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>


#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace memcomm::view {

void drop_callback(GLFWwindow* w, int count, const char** paths) {
  auto* app = static_cast<App*>(glfwGetWindowUserPointer(w));
  if (app == nullptr) return;
  for (int i = 0; i < count; ++i) app->pending_drops_.emplace_back(paths[i]);
}

App::App(AppOptions opt) : opt_(std::move(opt)) {
  std::string error;
  // main() checks --panes first (exit 2); an in-process caller that passes a bad list gets the
  // message in the UI and every pane.
  if (!parse_panes(opt_.panes, st_.panes, error)) st_.message(error);
}

App::~App() {
  stop_live_waker();  // before live_ goes: the waker reads its stats
  advice_job_.reset();  // kills a memcomm-trace still running
  load_.reset();
  if (imgui_ready_) {
    ImGui_ImplOpenGL3_Shutdown();
    ImGui_ImplGlfw_Shutdown();
    ImGui::DestroyContext();
  }
  if (window_) glfwDestroyWindow(window_);
}

namespace {
// GLFW is initialised once per process and terminated at exit: tests open several Apps one after
// another, and re-initialising GLFW's X11 platform after glfwTerminate fails on Xvfb.
std::string g_glfw_error;  // last GLFW error, for the message when opening a window fails

bool init_glfw_once() {
  static const bool ok = [] {
    glfwSetErrorCallback([](int, const char* what) { g_glfw_error = what ? what : ""; });
    if (!glfwInit()) return false;
    std::atexit(glfwTerminate);
    return true;
  }();
  return ok;
}
}  // namespace

bool App::open_window(std::string& error) {
  if (!init_glfw_once()) {
    error = "cannot open a window: no display (set DISPLAY, or run headless modes under xvfb-run -a): " + g_glfw_error;
    return false;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_VISIBLE, opt_.hidden ? GLFW_FALSE : GLFW_TRUE);
  window_ = glfwCreateWindow(opt_.width, opt_.height, "memcomm-view", nullptr, nullptr);
  if (window_ == nullptr) {
    error = "cannot open a window: no OpenGL 3.3 core context on this display: " + g_glfw_error;
    return false;
  }
  glfwMakeContextCurrent(window_);
  glfwSwapInterval(opt_.hidden ? 0 : 1);
  glfwSetWindowUserPointer(window_, this);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;
  ImGui::StyleColorsDark();
  ImGui::GetStyle().WindowRounding = 0;
  ImGui_ImplGlfw_InitForOpenGL(window_, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");
  glfwSetDropCallback(window_, drop_callback);  // ImGui's backend does not use the drop callback
  imgui_ready_ = true;
  return true;
}

// A file open already (or given twice at once) is not loaded again: its events would come back as a
// second rank of the same run (memcomm-trace refuses it: "is given twice").
std::vector<std::string> App::not_open_yet(std::vector<std::string> paths) {
  std::vector<std::string> out;
  for (auto& p : paths) {
    const auto same = [&p](const std::string& q) {
      std::error_code ec;
      return q == p || std::filesystem::equivalent(q, p, ec);
    };
    if (std::any_of(opened_paths_.begin(), opened_paths_.end(), same)) {
      st_.message(p + " is open already: not loaded again");
      continue;
    }
    opened_paths_.push_back(p);
    out.push_back(std::move(p));
  }
  return out;
}

void App::start_load(std::vector<std::string> paths) {
  if (paths.empty()) return;
  if (load_) {  // one load at a time: queue behind it
    for (auto& p : paths) pending_drops_.push_back(std::move(p));
    return;
  }
  paths = not_open_yet(std::move(paths));
  if (paths.empty()) return;
  if (!opt_.hidden && !opt_.load.has_range() && range_paths_.empty()) {
    for (const auto& p : paths) {
      std::error_code ec;
      const auto bytes = std::filesystem::file_size(p, ec);
      std::string unknown;
      if (!ec && bytes >= opt_.range_prompt_bytes &&
          detect_input(p, unknown) != InputKind::TorchSnapshot) {  // ask first (range_prompt() starts the load)
        range_paths_ = std::move(paths);
        return;
      }
    }
  }
  st_.load_progress = 0;
  load_ = std::make_unique<BackgroundLoad>(std::move(paths), opt_.load);
}

void App::range_prompt() {
  st_.range_load = st_.range_from = st_.range_to = AppState::Point{};
  if (range_paths_.empty()) return;
  if (!ImGui::IsPopupOpen("Large file")) ImGui::OpenPopup("Large file");
  if (!ImGui::BeginPopupModal("Large file", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) return;
  ImGui::Text("%s is large. Load only a time range first?", range_paths_.front().c_str());
  ImGui::TextUnformatted("Seconds from the first event of the file:");
  ImGui::SetNextItemWidth(120);
  ImGui::InputFloat("from", &range_lo_s_, 1, 10, "%.3f");
  st_.range_from = item_text_field();
  ImGui::SameLine();
  ImGui::SetNextItemWidth(120);
  ImGui::InputFloat("to", &range_hi_s_, 1, 10, "%.3f");
  st_.range_to = item_text_field();
  range_lo_s_ = std::max(0.0f, range_lo_s_);
  LoadOptions o = opt_.load;
  const bool valid = range_hi_s_ > range_lo_s_;
  bool go = false;
  const bool load_range = ImGui::Button("Load range");
  st_.range_load = item_centre();
  if (load_range && valid) {
    o.range_lo_s = range_lo_s_;
    o.range_hi_s = range_hi_s_;
    go = true;
  }
  ImGui::SameLine();
  if (ImGui::Button("Load everything")) go = true;
  ImGui::SameLine();
  if (ImGui::Button("Cancel")) {
    range_paths_.clear();
    ImGui::CloseCurrentPopup();
  }
  if (go) {
    st_.load_progress = 0;
    load_ = std::make_unique<BackgroundLoad>(std::move(range_paths_), o);
    range_paths_.clear();
    ImGui::CloseCurrentPopup();
  }
  ImGui::EndPopup();
}

void App::poll_load() {
  if (!pending_drops_.empty() && !load_) {
    std::vector<std::string> p;
    p.swap(pending_drops_);
    start_load(std::move(p));
  }
  if (!load_) return;
  if (!load_->done()) {
    st_.load_progress = load_->progress();
    st_.loading_file = load_->current_file();
    return;
  }
  for (const auto& e : load_->errors()) {
    st_.message(e);
    ++load_errors_;
  }
  for (const auto& p : load_->failed_paths())  // one that failed may be opened again, fixed
    opened_paths_.erase(std::remove(opened_paths_.begin(), opened_paths_.end(), p), opened_paths_.end());
  for (const auto& w : load_->warnings()) st_.message(w);  // shown, not counted as a failed load
  Timeline t = load_->take();
  if (live_ && live_published_ && (!t.sources.empty() || !t.empty())) {
    // The live model is appended to in place by its own builder (Note [Live rebuild]): files
    // cannot be merged into it.
    st_.message("files opened while receiving live streams are not shown (the live view is not merged with files)");
    t = Timeline();
  }
  if (!t.sources.empty() || !t.empty()) {
    st_.set_timeline(std::move(t), true);
    for (const std::string& w : shown_elsewhere(st_.tl, ranks_told_)) st_.message(w);
    warn_about_mixed_runs();
  }
  show_allocations_for_stacks();
  load_.reset();
  st_.load_progress = -1;
  redraw_frames_ = 3;
  update_advice();
}

// Note [One run or several] (trace/src/mixed_runs.cpp), as memcomm-trace warns: over everything
// loaded so far, so a file opened later into the view is checked against the ones before it. Each
// line is shown once.
void App::warn_about_mixed_runs() {
  for (const std::string& w : prof::mixed_run_warnings(st_.tl.runs)) {
    const std::string line = "warning: " + w;
    if (std::find(st_.messages.begin(), st_.messages.end(), line) == st_.messages.end()) st_.message(line);
  }
}

// A snapshot is opened to see who holds its memory: unless --panes chose the panes, loading a file
// with stacks shows the allocation timeline and its "who holds memory" pane, and, when nothing
// loaded has steps (a snapshot has none), the Summary takes the step table's half of its row (at
// 1600x900 its figures were cut off beside an empty table).
void App::show_allocations_for_stacks() {
  if (!opt_.panes.empty()) return;
  for (const auto& rd : st_.tl.ranks)
    if (rd.stacks) st_.panes.allocations = true;
  if (!st_.steps.empty() && steps_hidden_) st_.panes.steps = true, steps_hidden_ = false;  // a trace with steps came
  if (st_.tl.ranks.empty() || panes_set_) return;
  panes_set_ = true;  // once: after that, the View menu's choice stands
  if (st_.panes.allocations && st_.steps.empty()) st_.panes.steps = false, steps_hidden_ = true;
}

std::uint32_t App::ranks_with_spans() const {
  std::uint32_t n = 0;
  for (const auto& rd : st_.tl.ranks)
    for (const auto& l : rd.lanes)
      if (l.span_count() > 0) {
        ++n;
        break;
      }
  return n;
}

std::uint64_t App::events_seen() const {
  if (live_) return live_->events_received();
  return st_.tl.event_count;
}

void App::apply_script() {
  if (script_.empty()) return;
  ImGuiIO& io = ImGui::GetIO();
  // The backend resets the mouse each frame from the (unfocused, hidden) window: re-inject.
  io.MousePos = ImVec2(mouse_x_, mouse_y_);
  io.MouseDown[0] = mouse_down_[0];
  io.MouseDown[1] = mouse_down_[1];
  if (script_hold_ > 0) {
    if (--script_hold_ == 0 && held_key_ >= 0) {
      io.KeysDown[held_key_] = false;
      held_key_ = -1;
    }
    return;
  }
  while (script_pos_ < script_.size()) {
    const ScriptCommand& c = script_[script_pos_++];
    switch (c.op) {
      case ScriptCommand::Op::Move:
        mouse_x_ = c.x, mouse_y_ = c.y;
        io.MousePos = ImVec2(c.x, c.y);
        return;
      case ScriptCommand::Op::Down:
      case ScriptCommand::Op::Up:
        mouse_down_[c.button] = c.op == ScriptCommand::Op::Down;
        io.MouseDown[c.button] = mouse_down_[c.button];
        return;
      case ScriptCommand::Op::Wheel:
        if (c.has_pos) {
          mouse_x_ = c.x, mouse_y_ = c.y;
          io.MousePos = ImVec2(c.x, c.y);
        }
        io.MouseWheel += c.wheel;
        return;
      case ScriptCommand::Op::Key:
        held_key_ = c.key;
        io.KeysDown[c.key] = true;
        script_hold_ = std::max(1, c.frames);
        return;
      case ScriptCommand::Op::Frames:
        if (c.frames <= 0) continue;
        script_hold_ = c.frames - 1;
        return;
      case ScriptCommand::Op::WaitEvents:
        if (wait_deadline_ == 0) wait_deadline_ = now_s() + c.timeout_s;
        if ((events_seen() >= c.events && !load_) || now_s() > wait_deadline_) {
          if (events_seen() < c.events) {  // the same count the wait is on (live: received)
            st_.message("script line " + std::to_string(c.line) + ": timed out waiting for " + std::to_string(c.events) +
                        " events (have " + std::to_string(events_seen()) + ")");
            ++script_failures_;
          }
          wait_deadline_ = 0;
          continue;
        }
        --script_pos_;  // retry next frame
        return;
      case ScriptCommand::Op::Type:
        io.AddInputCharactersUTF8(c.path.c_str());
        return;
      case ScriptCommand::Op::Drop: {
        const char* paths[] = {c.path.c_str()};
        drop_callback(window_, 1, paths);  // as GLFW calls it when a file is dropped
        return;
      }
      case ScriptCommand::Op::Screenshot: {
        std::string error;
        // Taken from the previous frame's draw data, which is what is on screen. Before the first
        // frame there is nothing on screen yet: hold the command one frame rather than skip it.
        if (frames_ == 0) {
          --script_pos_;
          return;
        }
        if (!write_png(c.path, error)) {
          st_.message("script line " + std::to_string(c.line) + ": " + error);
          ++script_failures_;
        }
        continue;
      }
    }
  }
}

void App::frame() {
  const double t0 = now_s();
  poll_load();
  poll_live();
  poll_advice();
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  apply_script();
  const double b0 = now_s(), c0 = thread_cpu_s();
  ImGui::NewFrame();
  build_ui();
  ImGui::Render();
  st_.build_ms = (now_s() - b0) * 1e3;
  st_.build_cpu_ms = (thread_cpu_s() - c0) * 1e3;
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  glViewport(0, 0, w, h);
  glClearColor(0.08f, 0.08f, 0.10f, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  if (opt_.bench) glFinish();  // keep the software rasterizer's work out of the next frame's build timing
  glfwSwapBuffers(window_);
  st_.frame_ms = (now_s() - t0) * 1e3;
  ++frames_;
  if (redraw_frames_ > 0) --redraw_frames_;
  // Held navigation keys animate: keep drawing while they are down.
  for (int k : {'W', 'A', 'S', 'D'})
    if (ImGui::GetIO().KeysDown[k]) redraw_frames_ = std::max(redraw_frames_, 2);
}

}  // namespace memcomm::view
