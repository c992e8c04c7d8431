// JSON parsing for the tests, compiled once for all of them (Note [One JSON parser for the tests]).
#pragma once

#include <nlohmann/json.hpp>

#include <iosfwd>
#include <string>

namespace memcomm::test {

// nlohmann::json::parse of a whole text or stream; a malformed document throws its parse_error.
nlohmann::json parse_json(const std::string& text);
nlohmann::json parse_json(std::istream& in);

}  // namespace memcomm::test
