// Note [One JSON parser for the tests]
// nlohmann::json::parse is a template on its input type: every translation unit that calls it
// instantiates the lexer and parser again, about 3 s of g++ -O2 and 7 s of clang's ASan+UBSan build
// per unity batch (test_replay's batch: 25.0 s -> 21.8 s and 34.3 s -> 27.3 s of CPU with the calls
// moved here). The tests that read the tools' JSON output were 16 such batches in the Release tree and
// 7 in the ASan+UBSan tree, so they call these two functions instead, and the parser is instantiated
// here once, for strings and for streams. Sources outside tests/ parse JSON in a handful of files and
// keep the library's call; so does the tune-cache fuzz target, which parses without exceptions.
#include "json_text.hpp"

#include <istream>

namespace memcomm::test {

nlohmann::json parse_json(const std::string& text) { return nlohmann::json::parse(text); }

nlohmann::json parse_json(std::istream& in) { return nlohmann::json::parse(in); }

}  // namespace memcomm::test
