// A CLI11 transform that reads an option's value with memcomm::parse_size, so every tool accepts the
// same sizes ("1.5GiB", "512MiB", "2GB") and rejects bad ones with the same message. Header-only:
// the tool links CLI11 itself.
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

}  // namespace memcomm
