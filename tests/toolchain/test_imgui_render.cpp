// Proves the viewer's toolchain: a hidden GLFW window with a GL 3.3 core context, Dear ImGui 1.86
// with its GLFW + OpenGL3 backends (inside Debian's libimgui.a), glReadPixels, and stb's PNG writer.
// Under `xvfb-run -a` Mesa's llvmpipe gives GL 4.5 core. With no display the case reports skipped.
#include "memcomm_test.hpp"

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>
#include <GL/gl.h>
#include <imgui.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int kWidth = 320;
constexpr int kHeight = 240;

struct Rgba {
  int r, g, b, a;
};

// Pixel (x, y) with y counted from the top, as ImGui places things.
Rgba pixel_at(const std::vector<std::uint8_t>& top_down, int x, int y) {
  const std::uint8_t* p = &top_down[(static_cast<std::size_t>(y) * kWidth + x) * 4];
  return {p[0], p[1], p[2], p[3]};
}

}  // namespace

TEST_CASE("hidden GLFW window renders an ImGui frame that reads back with the expected pixels", "[gui]") {
  if (!glfwInit()) MEMCOMM_SKIP_TEST("glfwInit failed: no display (run under xvfb-run -a)");
  glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  GLFWwindow* window = glfwCreateWindow(kWidth, kHeight, "memcomm toolchain", nullptr, nullptr);
  if (window == nullptr) {
    glfwTerminate();
    MEMCOMM_SKIP_TEST("glfwCreateWindow failed: no GL 3.3 core context on this display");
  }
  glfwMakeContextCurrent(window);
  const std::string gl_version = reinterpret_cast<const char*>(glGetString(GL_VERSION));
  INFO("GL_VERSION " << gl_version << ", renderer " << reinterpret_cast<const char*>(glGetString(GL_RENDERER)));
  CHECK((gl_version.rfind("3.", 0) == 0 || gl_version.rfind("4.", 0) == 0));

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // a test leaves no imgui.ini behind
  REQUIRE(ImGui_ImplGlfw_InitForOpenGL(window, false));
  REQUIRE(ImGui_ImplOpenGL3_Init("#version 330 core"));

  // Known content: a red rectangle at (40,30)-(140,90) and a green one at (200,150)-(300,220)
  // drawn on the background draw list over a blue clear colour.
  const ImVec2 red_min(40, 30), red_max(140, 90), green_min(200, 150), green_max(300, 220);
  for (int frame = 0; frame < 2; ++frame) {  // the first frame builds the font atlas
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::GetIO().DisplaySize = ImVec2(kWidth, kHeight);
    ImGui::GetIO().DisplayFramebufferScale = ImVec2(1, 1);
    ImGui::NewFrame();
    ImDrawList* dl = ImGui::GetBackgroundDrawList();
    dl->AddRectFilled(red_min, red_max, IM_COL32(255, 0, 0, 255));
    dl->AddRectFilled(green_min, green_max, IM_COL32(0, 255, 0, 255));
    ImGui::Render();
    glViewport(0, 0, kWidth, kHeight);
    glClearColor(0.f, 0.f, 1.f, 1.f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  }
  glFinish();

  std::vector<std::uint8_t> bottom_up(static_cast<std::size_t>(kWidth) * kHeight * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, kWidth, kHeight, GL_RGBA, GL_UNSIGNED_BYTE, bottom_up.data());
  REQUIRE(glGetError() == GL_NO_ERROR);
  std::vector<std::uint8_t> top_down(bottom_up.size());
  const std::size_t row = static_cast<std::size_t>(kWidth) * 4;
  for (int y = 0; y < kHeight; ++y)
    std::copy_n(&bottom_up[(kHeight - 1 - y) * row], row, &top_down[y * row]);

  // Inside each rectangle, its colour; outside both, the clear colour.
  const Rgba red = pixel_at(top_down, 90, 60), green = pixel_at(top_down, 250, 185), bg = pixel_at(top_down, 10, 200);
  CHECK((red.r == 255 && red.g == 0 && red.b == 0));
  CHECK((green.r == 0 && green.g == 255 && green.b == 0));
  CHECK((bg.r == 0 && bg.g == 0 && bg.b == 255));
  // The edges sit where they were drawn (one pixel either side of the boundary).
  CHECK(pixel_at(top_down, 40, 60).r == 255);
  CHECK(pixel_at(top_down, 38, 60).r == 0);
  CHECK(pixel_at(top_down, 90, 89).r == 255);
  CHECK(pixel_at(top_down, 90, 91).r == 0);

  // The PNG round-trips through stb: what was written is what was read back.
  const std::string png = std::string(MEMCOMM_BINARY_DIR) + "/tests/toolchain_imgui_render.png";
  REQUIRE(stbi_write_png(png.c_str(), kWidth, kHeight, 4, top_down.data(), static_cast<int>(row)) != 0);
  int w = 0, h = 0, channels = 0;
  unsigned char* loaded = stbi_load(png.c_str(), &w, &h, &channels, 4);
  REQUIRE(loaded != nullptr);
  CHECK(w == kWidth);
  CHECK(h == kHeight);
  CHECK(std::equal(top_down.begin(), top_down.end(), loaded));
  stbi_image_free(loaded);

  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
}
