// Checking, before any work, that an output can be written: every tool that takes an output path
// (memcomm-train's --trace/--summary-json/--checkpoint-dir, memcomm-tune's and memcomm-replay's
// --json) asks the same two questions.
#pragma once

#include <filesystem>
#include <string>

namespace memcomm {

// The folder a FILE argument lives in ("." for a bare name).
std::filesystem::path parent_folder(const std::string& file);

// Creates and removes a uniquely named file in `dir`: the only sure test that files can be made
// there (access(2) ignores read-only mounts' nuances and ACLs). Leaves nothing behind.
bool can_create_in(const std::filesystem::path& dir);

}  // namespace memcomm
