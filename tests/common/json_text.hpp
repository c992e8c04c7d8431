// JSON parsing for the tests, compiled once for all of them (Note [One JSON parser for the tests]).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace memcomm::test {

// nlohmann::json::parse of a whole text; a malformed document throws its parse_error.
nlohmann::json parse_json(const std::string& text);
// The same for the file at `path`; a file that cannot be opened throws std::runtime_error naming it.
nlohmann::json read_json(const std::string& path);

}  // namespace memcomm::test
