// Checking, before any work, that an output can be written: every tool that takes an output path
// (memcomm-train's --trace/--summary-json/--checkpoint-dir, memcomm-tune's and memcomm-replay's
// --json) asks the same two questions.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace memcomm {

// The folder a FILE argument lives in ("." for a bare name).
std::filesystem::path parent_folder(const std::string& file);

// Why `file`'s name is too long for its folder's file system (pathconf's NAME_MAX, usually 255
// bytes), or "": the folder takes new files, but this one would fail at the end of the work.
std::string name_length_problem(const std::string& file);

// Creates and removes a uniquely named file in `dir`: the only sure test that files can be made
// there (access(2) ignores read-only mounts' nuances and ACLs). Leaves nothing behind.
bool can_create_in(const std::filesystem::path& dir);

// Note [Outputs that would destroy data]
// An output that is one of the inputs (the same file by any name: a symlink, a hard link) is always
// refused: `memcomm-trace merge run.rank0.mct run.rank1.mct`, OUT forgotten, would replace rank 0's
// trace with a merge of rank 1 alone, and `memcomm-replay --json run.mct run.mct` would replace the
// trace with its results. Where OUT is positional (merge, convert) any existing OUT is refused unless
// --force (refuse_existing); a named output (--json, --chrome) may replace another file. A folder is
// never an output. Returns the reason to refuse, or "" to go ahead.
std::string output_conflict(const std::string& out, const std::vector<std::string>& inputs, bool refuse_existing);

}  // namespace memcomm
