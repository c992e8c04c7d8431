#include "gui_fixture.hpp"

#include <memcomm/view/app/input_script.hpp>
#include <memcomm/view/builder.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <sys/wait.h>

namespace gui_test {

using namespace memcomm::view;
using memcomm::prof::EventKind;

Timeline make_fixture() {
  TimelineBuilder b;
  for (std::uint32_t r = 0; r < 2; ++r) {
    b.phase(r, "step", 0, us(1000));
    b.phase(r, "step", us(1000), us(2000));
    b.phase(r, "forward", us(100), us(400));
    b.phase(r, "backward", us(400), us(800));
    b.kernel(r, 7, "gemm", us(100), us(300));
    b.kernel(r, 7, "conv_bwd", us(450), us(700));
    b.memcpy(r, 8, "HtoD", us(300), us(350));
    b.collective(r, "all_reduce", 64ull << 20, 0, 1, r == 0 ? us(500) : us(600), r == 0 ? us(700) : us(750), 2);
  }
  const std::uint64_t seg = 0x7f0000000000ull;
  b.alloc_event(0, {0, seg, 1ull << 30, 0, EventKind::SegmentAlloc});
  b.alloc_event(0, {us(200), seg, 256ull << 20, 0, EventKind::Alloc});
  b.alloc_event(0, {us(500), seg + (256ull << 20), 512ull << 20, 0, EventKind::Alloc});
  b.alloc_event(0, {us(800), seg, 256ull << 20, 0, EventKind::FreeCompleted});
  b.alloc_event(0, {us(1990), seg + (256ull << 20), 512ull << 20, 0, EventKind::FreeCompleted});
  return b.finish("fixture");
}

std::unique_ptr<App> make_app(int w, int h, const std::string& panes) {
  AppOptions o;
  o.width = w;
  o.height = h;
  o.hidden = true;
  o.panes = panes;
  auto app = std::make_unique<App>(o);
  std::string why;
  if (!app->open_window(why)) MEMCOMM_SKIP_TEST(why);
  return app;
}

void frames(App& app, int n) {
  for (int i = 0; i < n; ++i) app.frame();
}

void run_script_and_load(App& app, const std::string& script) {
  std::vector<ScriptCommand> cmds;
  std::string error;
  REQUIRE(parse_script(script, "test", cmds, error));
  app.set_script(std::move(cmds));
  for (int i = 0; i < 500 && !app.script_done(); ++i) app.frame();
  REQUIRE(app.script_done());
  for (int i = 0; i < 3000 && app.loading(); ++i) {
    app.frame();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  frames(app, 2);
}

std::string at(const AppState::Point& p) { return std::to_string(p.x) + " " + std::to_string(p.y); }

bool has_source(const AppState& st, const std::string& path) {
  for (const auto& s : st.tl.sources)
    if (s.compare(0, path.size(), path) == 0) return true;
  return false;
}

palette::Rgb Image::at(int x, int y) const {
  const std::uint8_t* p = &rgba[(static_cast<std::size_t>(y) * static_cast<std::size_t>(w) + static_cast<std::size_t>(x)) * 4];
  return {p[0], p[1], p[2]};
}

static bool same(palette::Rgb a, palette::Rgb b) { return a.r == b.r && a.g == b.g && a.b == b.b; }

bool Image::column_has(int x, int y0, int y1, palette::Rgb c) const { return topmost(x, y0, y1, c) >= 0; }

int Image::topmost(int x, int y0, int y1, palette::Rgb c) const {
  for (int y = std::max(0, y0); y < std::min(h, y1); ++y)
    if (same(at(x, y), c)) return y;
  return -1;
}

int Image::count(int x0, int y0, int x1, int y1, palette::Rgb c) const {
  int n = 0;
  for (int y = std::max(0, y0); y < std::min(h, y1); ++y)
    for (int x = std::max(0, x0); x < std::min(w, x1); ++x) n += same(at(x, y), c);
  return n;
}

std::string out_dir() {
  const std::string d = std::string(MEMCOMM_BINARY_DIR) + "/tests/viewer_out";
  std::filesystem::create_directories(d);
  return d;
}

Image grab(App& app, const std::string& png_name) {
  Image img;
  REQUIRE(app.read_pixels(img.rgba, img.w, img.h));
  std::string error;
  CHECK(app.write_png(out_dir() + "/" + png_name, error));  // kept for people to look at
  return img;
}

float x_of(const AppState& st, TimeNs t) {
  return st.time_x0 + static_cast<float>(static_cast<double>(t - st.view_t0) / static_cast<double>(st.view_t1 - st.view_t0) *
                                         (st.time_x1 - st.time_x0));
}

float row_y(const AppState& st, int slot, LaneKind kind, int row) {
  for (const auto& l : st.layout) {
    if (l.slot != slot || l.lane < 0 || l.row != row) continue;
    if (st.tl.ranks[static_cast<std::size_t>(slot)].lanes[static_cast<std::size_t>(l.lane)].kind == kind) return l.y + l.h / 2;
  }
  return -1;
}

int run_viewer(const std::string& args, std::string* output) {
  const std::string cmd = std::string(MEMCOMM_BINARY_DIR) + "/bin/memcomm-view " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf{};
  std::string out;
  while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  const int st = pclose(p);
  if (output) *output = out;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace gui_test
