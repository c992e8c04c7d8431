// Note [One JSON parser for the tests]
// nlohmann::json::parse is a template on its input type: every translation unit that calls it
// instantiates the lexer and parser again. The tests that read the tools' JSON output were 17 unity
// batches in the Release tree (g++ -O3, before Note [Test drivers at -Og]) and 7 in the ASan+UBSan tree
// (clang -O1), so they call these two functions instead, and the parser is instantiated here once,
// for strings and for files. Those batches, compiled alone one after another with the build's own
// commands: 186.2 s -> 151.1 s of CPU in the Release tree, 112.5 s -> 89.2 s in the ASan+UBSan tree,
// this file included (test_replay's first batch 22.0 s -> 14.0 s and 31.8 s -> 28.9 s). Sources
// outside tests/ parse JSON in a handful of files and keep the library's call; so does the
// tune-cache fuzz target, which parses without exceptions.
#include "json_text.hpp"

#include <fstream>
#include <stdexcept>

namespace memcomm::test {

nlohmann::json parse_json(const std::string& text) { return nlohmann::json::parse(text); }

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

}  // namespace memcomm::test
