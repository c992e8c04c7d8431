// Writing an output so that it is replaced whole or not at all (Note [Outputs replaced whole]).
// Every tool that writes a result file uses it: memcomm-train's checkpoints and --summary-json,
// memcomm-tune's --json and cache, memcomm-replay's --json, memcomm-trace convert, merge and export.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace memcomm {

// A result file could not be written; the message names the file and why (strerror).
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Note [Outputs replaced whole]
// A result is written under a temporary name beside its destination and renamed over it only when
// complete and on disk (fsync), so a full disk, a crash or a kill leaves the previous file as it was,
// or no file, and never a truncated one that reads back as a shorter result. Two kinds of destination
// are not a plain file to replace: a symlink is written through (the temporary goes beside the file it
// points to, and the rename replaces that file, not the link), and an existing destination that is not
// a regular file (/dev/stdout, a FIFO, a device) is written in place, since a rename would put a file
// where the device was. A temporary that is not committed is removed.
class ReplacingFile {
 public:
  // Creates the temporary (the destination's mode when it exists, else 0666 less the umask).
  // Throws OutputError when the folder does not take new files.
  explicit ReplacingFile(const std::string& destination);
  ~ReplacingFile();
  ReplacingFile(const ReplacingFile&) = delete;
  ReplacingFile& operator=(const ReplacingFile&) = delete;

  // Where the writer writes: the temporary, or the destination itself when it is not a regular file.
  const std::string& path() const { return write_path_; }
  // Flushes the written file to disk and renames it over the destination. Throws OutputError.
  void commit();

 private:
  std::string destination_;  // as given, for messages
  std::string target_;       // the file the rename replaces (a symlink's target)
  std::string write_path_;
  bool in_place_ = false;
  bool committed_ = false;
};

// The whole of `contents` into `destination`, replaced whole. Throws OutputError.
void write_replacing(const std::string& destination, std::string_view contents);

}  // namespace memcomm
