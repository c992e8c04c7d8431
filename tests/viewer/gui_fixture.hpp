// Shared by the GUI tests: a hand-built two-rank fixture with known events, an App in a hidden
// window (skipped when there is no display), and pixel helpers.
#pragma once

#include "memcomm_test.hpp"

#include <memcomm/view/app/app.hpp>
#include <memcomm/view/app/palette.hpp>

#include <memory>
#include <string>
#include <vector>

namespace gui_test {

using memcomm::view::TimeNs;

// Two steps per rank over [0, 2 ms):
//   phases  step [0,1ms) [1ms,2ms); forward [100us,400us); backward [400us,800us)
//   kernel  stream 7: [100us,300us) [450us,700us)       memcpy stream 8: [300us,350us)
//   collective all_reduce 64 MiB seq 1: rank 0 [500us,700us), rank 1 [600us,750us) (straggler)
//   memory (rank 0) allocated 0 -> 256 MiB at 200us -> 768 MiB at 500us -> 512 MiB at 800us;
//          reserved 1 GiB from 0; allocator events: one 1 GiB segment, blocks as above
memcomm::view::Timeline make_fixture();

constexpr TimeNs us(double v) { return static_cast<TimeNs>(v * 1000); }
inline constexpr double kMiB = 1024.0 * 1024.0;

// An App with a hidden window of the given size showing `panes`; skips the test without a display.
std::unique_ptr<memcomm::view::App> make_app(int w, int h, const std::string& panes);
// Renders n frames.
void frames(memcomm::view::App& app, int n);
// Runs `script` (input_script.hpp) to its end, then frames until loading is done.
void run_script_and_load(memcomm::view::App& app, const std::string& script);
// "x y" of a point, as input scripts write it.
std::string at(const memcomm::view::AppState::Point& p);
// True when a loaded source's name starts with `path`.
bool has_source(const memcomm::view::AppState& st, const std::string& path);

struct Image {
  int w = 0, h = 0;
  std::vector<std::uint8_t> rgba;  // top-down
  memcomm::view::palette::Rgb at(int x, int y) const;
  bool column_has(int x, int y0, int y1, memcomm::view::palette::Rgb c) const;
  int topmost(int x, int y0, int y1, memcomm::view::palette::Rgb c) const;  // -1 when absent
  int count(int x0, int y0, int x1, int y1, memcomm::view::palette::Rgb c) const;
};
Image grab(memcomm::view::App& app, const std::string& png_name);

// Screen x of time t on the shared time axis.
float x_of(const memcomm::view::AppState& st, TimeNs t);
// Centre y of a timeline row (rank slot, lane kind, row); -1 when not on screen.
float row_y(const memcomm::view::AppState& st, int slot, memcomm::view::LaneKind kind, int row = 0);

// Runs memcomm-view with arguments; returns its exit status (-1 when it could not run).
int run_viewer(const std::string& args, std::string* output = nullptr);
std::string out_dir();

}  // namespace gui_test
