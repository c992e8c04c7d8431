// Whether standard output took what a tool printed (Note [Output that was not written]).
#pragma once

#include <string>

namespace memcomm {

// Note [Output that was not written]
// A tool's results and a run's log go to standard output, buffered, so a redirection to a full disk
// (or a closed file) fails only when the buffer is flushed: at exit, where nothing looked at the
// error, and the tool exited 0 with its results lost. So each tool ends its main() through
// stdout_checked(): it flushes standard output and, when a write failed, says so on standard error
// and turns a success into exit 1 (another exit code stands). A write that fails earlier, while a
// large result is printed, is fmt's std::system_error, which the tools report as an error (exit 1).
//
// `code` when standard output took everything; otherwise 1 (or `code`, when already a failure),
// after a line on standard error naming `tool` and the reason.
int stdout_checked(int code, const char* tool);

// Whether `path` names the file standard output writes to ("-", /dev/stdout, or the file stdout was
// redirected to). A tool that writes its result there prints its summary line on standard error: on
// standard output, at offset 0 of a file the result was written to from its start, it overwrote the
// result's first bytes.
bool is_standard_output(const std::string& path);

}  // namespace memcomm
