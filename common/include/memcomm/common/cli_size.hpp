// CLI11 checks every tool shares: sizes read with memcomm::parse_size, so every tool accepts the same
// sizes ("1.5GiB", "512MiB", "2GB") and rejects bad ones with the same message, and values that must
// not be empty. Header-only: the tool links CLI11 itself.
#pragma once

#include <CLI/CLI.hpp>

#include <stdexcept>
#include <string>

#include "memcomm/common/bytes.hpp"

namespace memcomm {

// `option->transform(size_transform())`: the value becomes its byte count; a zero ("0", "0B",
// "0 MiB") becomes 0, which the tools read as "no limit".
inline CLI::Validator size_transform() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        try {
          value = std::to_string(parse_size(value, /*allow_zero=*/true));
          return {};
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
      },
      "SIZE", "size");
}

// `option->check(not_empty())`: an empty value ("--trace ''", an unset shell variable) is an error,
// not the option left out.
inline CLI::Validator not_empty() {
  return CLI::Validator([](std::string& value) -> std::string { return value.empty() ? "must not be empty" : ""; },
                        "", "not empty");
}

}  // namespace memcomm
