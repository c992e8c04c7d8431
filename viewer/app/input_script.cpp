#include <memcomm/view/app/input_script.hpp>

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace memcomm::view {

namespace {
int parse_button(const std::string& s, bool& ok) {
  if (s.empty() || s == "left") return 0;
  if (s == "right") return 1;
  ok = false;
  return 0;
}
int parse_key(const std::string& s) {
  if (s.size() == 1 && std::isalpha(static_cast<unsigned char>(s[0]))) return GLFW_KEY_A + (std::toupper(s[0]) - 'A');
  if (s.size() == 1 && std::isdigit(static_cast<unsigned char>(s[0]))) return GLFW_KEY_0 + (s[0] - '0');
  if (s == "escape") return GLFW_KEY_ESCAPE;
  if (s == "enter") return GLFW_KEY_ENTER;
  if (s == "left") return GLFW_KEY_LEFT;
  if (s == "right") return GLFW_KEY_RIGHT;
  if (s == "up") return GLFW_KEY_UP;
  if (s == "down") return GLFW_KEY_DOWN;
  return -1;
}

// Note [Script counts]: counts are read as words of digits, not through `>> uint64_t`, which takes
// "-5" and wraps it to 2^64-5 (a wait for ever). Frame counts stop at kMaxScriptFrames so a typo
// cannot hold a headless run for days.
constexpr std::uint64_t kMaxScriptFrames = 1'000'000;
bool read_count(std::istream& in, std::uint64_t max, std::uint64_t& out) {
  std::string w;
  if (!(in >> w)) return false;
  const char* end = w.data() + w.size();
  auto [p, ec] = std::from_chars(w.data(), end, out);
  return ec == std::errc() && p == end && out <= max;
}
// An optional count: absent leaves `out` as is; present must be valid.
bool read_optional_count(std::istream& in, std::uint64_t max, std::uint64_t& out) {
  in >> std::ws;
  if (in.eof()) return true;
  return read_count(in, max, out);
}
}  // namespace

bool parse_script(const std::string& text, const std::string& name, std::vector<ScriptCommand>& out,
                  std::string& error) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream ls(line);
    std::string op;
    if (!(ls >> op)) continue;
    auto fail = [&](const std::string& why) {
      error = name + ":" + std::to_string(n) + ": " + why + " in '" + line + "'";
      return false;
    };
    ScriptCommand c;
    c.line = n;
    bool ok = true;
    std::string word;
    if (op == "move") {
      c.op = ScriptCommand::Op::Move;
      if (!(ls >> c.x >> c.y)) return fail("move needs X Y");
      out.push_back(c);
    } else if (op == "down" || op == "up") {
      c.op = op == "down" ? ScriptCommand::Op::Down : ScriptCommand::Op::Up;
      ls >> word;
      c.button = parse_button(word, ok);
      if (!ok) return fail("button must be left or right");
      out.push_back(c);
    } else if (op == "click") {
      if (!(ls >> c.x >> c.y)) return fail("click needs X Y");
      ls >> word;
      c.button = parse_button(word, ok);
      if (!ok) return fail("button must be left or right");
      c.op = ScriptCommand::Op::Move;
      out.push_back(c);
      c.op = ScriptCommand::Op::Frames;  // let the hover settle
      c.frames = 1;
      out.push_back(c);
      c.op = ScriptCommand::Op::Down;
      out.push_back(c);
      c.op = ScriptCommand::Op::Up;
      out.push_back(c);
    } else if (op == "drag") {
      float x0, y0, x1, y1;
      if (!(ls >> x0 >> y0 >> x1 >> y1)) return fail("drag needs X0 Y0 X1 Y1");
      ls >> word;
      const int button = parse_button(word, ok);
      if (!ok) return fail("button must be left or right");
      c.button = button;
      c.op = ScriptCommand::Op::Move;
      c.x = x0, c.y = y0;
      out.push_back(c);
      c.op = ScriptCommand::Op::Down;
      out.push_back(c);
      for (int i = 1; i <= 8; ++i) {
        c.op = ScriptCommand::Op::Move;
        c.x = x0 + (x1 - x0) * static_cast<float>(i) / 8;
        c.y = y0 + (y1 - y0) * static_cast<float>(i) / 8;
        out.push_back(c);
      }
      c.op = ScriptCommand::Op::Up;
      out.push_back(c);
    } else if (op == "wheel") {
      c.op = ScriptCommand::Op::Wheel;
      if (!(ls >> c.wheel)) return fail("wheel needs DY");
      if (ls >> c.x >> c.y) c.has_pos = true;
      out.push_back(c);
    } else if (op == "key") {
      c.op = ScriptCommand::Op::Key;
      if (!(ls >> word)) return fail("key needs a key name");
      c.key = parse_key(word);
      if (c.key < 0) return fail("unknown key '" + word + "'");
      std::uint64_t hold = 1;
      if (!read_optional_count(ls, kMaxScriptFrames, hold) || hold == 0)
        return fail("key hold must be 1.." + std::to_string(kMaxScriptFrames) + " frames");
      c.frames = static_cast<int>(hold);
      out.push_back(c);
    } else if (op == "frames" || op == "wait") {
      c.op = ScriptCommand::Op::Frames;
      std::uint64_t n = 0;
      if (!read_count(ls, kMaxScriptFrames, n))
        return fail(op + " needs a frame count 0.." + std::to_string(kMaxScriptFrames));
      c.frames = static_cast<int>(n);
      out.push_back(c);
    } else if (op == "type" || op == "drop") {
      c.op = op == "type" ? ScriptCommand::Op::Type : ScriptCommand::Op::Drop;
      std::getline(ls >> std::ws, c.path);
      while (!c.path.empty() && std::isspace(static_cast<unsigned char>(c.path.back()))) c.path.pop_back();
      if (c.path.empty()) return fail(op + (op == "type" ? " needs text" : " needs a path"));
      out.push_back(c);
    } else if (op == "wait-events") {
      c.op = ScriptCommand::Op::WaitEvents;
      if (!read_count(ls, std::numeric_limits<std::uint64_t>::max(), c.events))
        return fail("wait-events needs an event count N >= 0");
      c.timeout_s = 10;
      if (ls >> word) {
        char* end = nullptr;
        c.timeout_s = std::strtod(word.c_str(), &end);
        // Finite: an infinite (or NaN) timeout would never end a headless run.
        if (*end != '\0' || !std::isfinite(c.timeout_s) || c.timeout_s < 0)
          return fail("wait-events timeout must be a number of seconds >= 0");
      }
      out.push_back(c);
    } else if (op == "screenshot") {
      c.op = ScriptCommand::Op::Screenshot;
      if (!(ls >> c.path)) return fail("screenshot needs a path");
      out.push_back(c);
    } else {
      return fail("unknown command '" + op + "'");
    }
  }
  return true;
}

bool load_script(const std::string& path, std::vector<ScriptCommand>& out, std::string& error) {
  std::error_code ec;
  // An ifstream opens a directory and then reads nothing: say so instead of running no script.
  if (std::filesystem::is_directory(path, ec)) {
    error = path + ": cannot read script: is a directory";
    return false;
  }
  std::ifstream f(path);
  if (!f) {
    error = path + ": cannot open script";
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) {
    error = path + ": cannot read script";
    return false;
  }
  return parse_script(ss.str(), path, out, error);
}

}  // namespace memcomm::view
