// --script FILE: input injected through ImGui's io before NewFrame, one command per line, so tests
// drive the real UI code paths (hover, click, drag, wheel, keys) in a hidden window.
//
//   move X Y              put the mouse at window pixel (X, Y)
//   down [left|right]     press a button (left when omitted); up [left|right] releases it
//   click X Y [left|right]  move, press one frame, release the next
//   drag X0 Y0 X1 Y1 [left|right]  press at (X0,Y0), move in 8 frames to (X1,Y1), release
//   wheel DY [X Y]        scroll DY notches (positive zooms in) at the mouse, or at (X, Y)
//   key K [N]             hold key K (W, A, S, D, ...) for N frames (1..1000000, default 1)
//   frames N              render N frames with the input unchanged (alias: wait N; 0..1000000)
//   wait-events N [SECONDS]  wait until N events are loaded/received (default 10 s timeout); a
//                         timeout is a failure: memcomm-view exits 1 at the end of the run
//   screenshot PATH       write the current frame to a PNG (a PNG that cannot be written: exit 1)
//   type TEXT             type TEXT (the rest of the line) into the focused text field
//   drop PATH             drop a file on the window (what GLFW's drop callback receives)
//   # comment
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memcomm::view {

struct ScriptCommand {
  enum class Op { Move, Down, Up, Wheel, Key, Frames, WaitEvents, Screenshot, Type, Drop } op;
  float x = 0, y = 0;      // Move; Wheel position when has_pos
  int button = 0;          // Down/Up: 0 left, 1 right
  float wheel = 0;         // Wheel notches
  bool has_pos = false;
  int key = 0;             // Key: GLFW key code
  int frames = 1;          // Key hold / Frames
  std::uint64_t events = 0;  // WaitEvents
  double timeout_s = 10;   // WaitEvents
  std::string path;        // Screenshot, Drop; Type: the text
  int line = 0;            // source line, for messages
};

// Parses a script; on error returns false with a message naming file and line.
bool parse_script(const std::string& text, const std::string& name, std::vector<ScriptCommand>& out,
                  std::string& error);
bool load_script(const std::string& path, std::vector<ScriptCommand>& out, std::string& error);

}  // namespace memcomm::view
