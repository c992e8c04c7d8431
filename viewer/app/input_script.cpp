#include <memcomm/view/app/input_script.hpp>

#include <memcomm/common/replacing_file.hpp>

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
// Where a comment starts: a '#' at the line's start or after a blank, so that `type ProfilerStep#551`
// and `drop run#2.mct` keep theirs.
std::size_t comment_start(const std::string& line) {
  for (std::size_t i = 0; i < line.size(); ++i)
    if (line[i] == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(line[i - 1])))) return i;
  return line.size();
}

// One parser per command: each reads the command's arguments from `ls` and appends the commands it
// expands to (a click is a move, a frame, a press and a release). Returns why the line is malformed,
// or "" when it is well formed.
std::string parse_pointer(const std::string& op, std::istream& ls, ScriptCommand c, std::vector<ScriptCommand>& out) {
  bool ok = true;
  std::string word;
  if (op == "move") {
    c.op = ScriptCommand::Op::Move;
    if (!(ls >> c.x >> c.y)) return "move needs X Y";
    out.push_back(c);
    return "";
  }
  if (op == "click" && !(ls >> c.x >> c.y)) return "click needs X Y";
  ls >> word;
  c.button = parse_button(word, ok);
  if (!ok) return "button must be left or right";
  if (op == "down" || op == "up") {
    c.op = op == "down" ? ScriptCommand::Op::Down : ScriptCommand::Op::Up;
    out.push_back(c);
    return "";
  }
  c.op = ScriptCommand::Op::Move;  // click
  out.push_back(c);
  c.op = ScriptCommand::Op::Frames;  // let the hover settle
  c.frames = 1;
  out.push_back(c);
  c.op = ScriptCommand::Op::Down;
  out.push_back(c);
  c.op = ScriptCommand::Op::Up;
  out.push_back(c);
  return "";
}

std::string parse_drag(std::istream& ls, ScriptCommand c, std::vector<ScriptCommand>& out) {
  float x0, y0, x1, y1;
  if (!(ls >> x0 >> y0 >> x1 >> y1)) return "drag needs X0 Y0 X1 Y1";
  std::string word;
  ls >> word;
  bool ok = true;
  c.button = parse_button(word, ok);
  if (!ok) return "button must be left or right";
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
  return "";
}

std::string parse_key_command(std::istream& ls, ScriptCommand c, std::vector<ScriptCommand>& out) {
  std::string word;
  c.op = ScriptCommand::Op::Key;
  if (!(ls >> word)) return "key needs a key name";
  c.key = parse_key(word);
  if (c.key < 0) return "unknown key '" + word + "'";
  std::uint64_t hold = 1;
  if (!read_optional_count(ls, kMaxScriptFrames, hold) || hold == 0)
    return "key hold must be 1.." + std::to_string(kMaxScriptFrames) + " frames";
  c.frames = static_cast<int>(hold);
  out.push_back(c);
  return "";
}

std::string parse_wait_events(std::istream& ls, ScriptCommand c, std::vector<ScriptCommand>& out) {
  c.op = ScriptCommand::Op::WaitEvents;
  if (!read_count(ls, std::numeric_limits<std::uint64_t>::max(), c.events))
    return "wait-events needs an event count N >= 0";
  c.timeout_s = 10;
  std::string word;
  if (ls >> word) {
    char* end = nullptr;
    c.timeout_s = std::strtod(word.c_str(), &end);
    // Finite: an infinite (or NaN) timeout would never end a headless run.
    if (*end != '\0' || !std::isfinite(c.timeout_s) || c.timeout_s < 0)
      return "wait-events timeout must be a number of seconds >= 0";
  }
  out.push_back(c);
  return "";
}

// wheel, frames/wait, type/drop, screenshot: one command each.
std::string parse_simple(const std::string& op, std::istream& ls, ScriptCommand c, std::vector<ScriptCommand>& out) {
  if (op == "wheel") {
    c.op = ScriptCommand::Op::Wheel;
    if (!(ls >> c.wheel)) return "wheel needs DY";
    if (ls >> c.x) {
      if (!(ls >> c.y)) return "wheel's position needs both X and Y";
      c.has_pos = true;
    }
  } else if (op == "frames" || op == "wait") {
    c.op = ScriptCommand::Op::Frames;
    std::uint64_t n = 0;
    if (!read_count(ls, kMaxScriptFrames, n)) return op + " needs a frame count 0.." + std::to_string(kMaxScriptFrames);
    c.frames = static_cast<int>(n);
  } else if (op == "type" || op == "drop") {
    c.op = op == "type" ? ScriptCommand::Op::Type : ScriptCommand::Op::Drop;
    std::getline(ls >> std::ws, c.path);
    while (!c.path.empty() && std::isspace(static_cast<unsigned char>(c.path.back()))) c.path.pop_back();
    if (c.path.empty()) return op + (op == "type" ? " needs text" : " needs a path");
  } else if (op == "screenshot") {
    c.op = ScriptCommand::Op::Screenshot;
    if (!(ls >> c.path)) return "screenshot needs a path";
    // As --screenshot's (Note [Outputs replaced whole]): '-' is no file here, and the folder must exist.
    if (const std::string problem = replace_problem(c.path); !problem.empty()) return "screenshot " + c.path + ": " + problem;
  } else {
    return "unknown command '" + op + "'";
  }
  out.push_back(c);
  return "";
}

std::string parse_command(const std::string& op, std::istream& ls, const ScriptCommand& c, std::vector<ScriptCommand>& out) {
  if (op == "move" || op == "down" || op == "up" || op == "click") return parse_pointer(op, ls, c, out);
  if (op == "drag") return parse_drag(ls, c, out);
  if (op == "key") return parse_key_command(ls, c, out);
  if (op == "wait-events") return parse_wait_events(ls, c, out);
  return parse_simple(op, ls, c, out);
}

}  // namespace

bool parse_script(const std::string& text, const std::string& name, std::vector<ScriptCommand>& out,
                  std::string& error) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    line.resize(comment_start(line));
    std::istringstream ls(line);
    std::string op;
    if (!(ls >> op)) continue;
    ScriptCommand c;
    c.line = n;
    std::string why = parse_command(op, ls, c, out), rest;
    ls.clear();  // a failed optional read (a button, a position) left its words for this check
    if (why.empty() && ls >> rest) why = "unexpected '" + rest + "' after the command";
    if (!why.empty()) {
      error = name + ":" + std::to_string(n) + ": " + why + " in '" + line + "'";
      return false;
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
