// JSON documents as text: the one way every tool writes the JSON it prints or saves.
//
// A file name is whatever bytes the file system holds, and a name that is not UTF-8 (a Latin-1 name
// from an old archive) made nlohmann-json's strict dump throw: memcomm-replay --json aborted, and
// other tools printed the library's exception instead of their result. JSON text must be UTF-8, so
// such bytes are written as U+FFFD; everything else is written exactly. Header-only: it needs
// nlohmann-json, which the library memcomm_common itself does not.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace memcomm {

// `j` as JSON text, with `indent` spaces per level (-1: one line).
inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A figure that may be unknown (a bandwidth of collectives that record no size): null then, so that a
// reader cannot take it for 0.
inline nlohmann::json number_or_null(double value, bool known) { return known ? nlohmann::json(value) : nlohmann::json(); }

}  // namespace memcomm
