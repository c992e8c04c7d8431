// CLI11 checks every tool shares, so each kind of value is accepted and refused alike everywhere, with
// a message that says what was expected: sizes read with memcomm::parse_size ("1.5GiB", "512MiB",
// "2GB"), whole numbers and positive numbers (CLI11's own PositiveNumber prints its range as "0 to"
// a 309-digit number), and values that must not be empty. Header-only: the tool links CLI11 itself.
#pragma once

#include <CLI/CLI.hpp>

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "memcomm/common/bytes.hpp"
#include "memcomm/common/input_file.hpp"

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

// not_empty() on every option of `app` (and of its option groups and subcommands, apps of their own)
// that takes a value: CLI11 reads an empty value as the option's default, as if it had not been given.
// Every tool calls it once its options are added.
inline void refuse_empty_values(CLI::App& app) {
  // An option whose value is optional (memcomm-view's --listen) keeps its own meaning for "".
  for (CLI::Option* opt : app.get_options([](CLI::Option* o) { return o->get_type_size() > 0 && o->get_expected_min() > 0; }))
    opt->check(not_empty());
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_empty_values(*sub);
}

// The first argument that reads as an option (a leading '-': not "-" alone, nor a negative number)
// that neither `app` nor the subcommand the arguments select defines, as the user wrote it; "" when
// there is none. CLI11 checks a positional's value before it refuses an unknown option, so
// `memcomm-trace export FILE -o out.json` said "out.json: no such file", where the mistake is -o.
inline std::string unknown_option(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* current = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;  // positionals only, from here
    if (arg.size() < 2 || arg[0] != '-') {
      for (CLI::App* sub : current->get_subcommands([&arg](CLI::App* s) { return s->check_name(arg); })) current = sub;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(arg[1])) || arg[1] == '.') continue;  // a negative number
    const std::string name = arg.substr(0, arg.find('='));
    if (current->get_option_no_throw(name) == nullptr && app.get_option_no_throw(name) == nullptr) return name;
  }
  return "";
}

// `option->check(whole_number(1))`: an integer of at least `min` (and within a long long).
inline CLI::Validator whole_number(long long min) {
  return CLI::Validator(
      [min](std::string& value) -> std::string {
        const std::string expected = "must be a whole number of at least " + std::to_string(min) + ", got '" + value + "'";
        if (value.empty() || value.find_first_not_of("+-0123456789") != std::string::npos) return expected;
        errno = 0;
        char* end = nullptr;
        const long long n = std::strtoll(value.c_str(), &end, 10);
        if (*end != '\0') return expected;
        if (errno == ERANGE) return "'" + value + "' is too large";
        return n >= min ? std::string() : expected;
      },
      ">= " + std::to_string(min));
}

// `option->check(existing_file())`: a regular file. CLI11's ExistingFile says "File does not exist"
// for any failure; this gives the system's reason (a symbolic link loop, a folder on the way that
// cannot be searched) and Note [Inputs are regular files]'s words for what is no file.
inline CLI::Validator existing_file() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        struct stat st {};
        if (::stat(value.c_str(), &st) != 0) {
          const int err = errno;
          return value + ": " + (err == ENOENT ? std::string("no such file") : std::strerror(err));
        }
        const std::string problem = input_file_problem(value);
        if (problem.empty()) return problem;
        return value + ": " + problem + (S_ISDIR(st.st_mode) ? " (give the files in it, as " + value + "/*)" : "");
      },
      "FILE");
}

// `option->check(positive_number())`: a number greater than 0 (fractions allowed).
inline CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        const double d = std::strtod(value.c_str(), &end);
        if (!value.empty() && *end == '\0' && d > 0 && std::isfinite(d)) return std::string();
        return "must be a finite number greater than 0, got '" + value + "'";
      },
      "> 0");
}

}  // namespace memcomm
