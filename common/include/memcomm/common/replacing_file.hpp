// Writing an output so that it is replaced whole or not at all (Note [Outputs replaced whole]).
// Every tool that writes a result file uses it: memcomm-train's checkpoints and --summary-json,
// memcomm-tune's --json and cache, memcomm-replay's --json, memcomm-trace convert, merge and export.
#pragma once

#include <cstddef>
#include <cstdint>
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
// points to, and the rename replaces that file, not the link, even where it does not exist yet), and a
// destination that is not a regular file (a FIFO, a device, anything under /dev or /proc, such as
// /dev/stdout, which would lead to whatever stdout is) is written in place, since a rename would put a
// file where the device was. A temporary that is not committed is removed; a process killed while
// writing leaves its NAME.tmp.HOST.PID.N beside the destination, which is untouched, until a later
// write of the same destination removes it (Note [Abandoned temporaries] in replacing_file.cpp).
class ReplacingFile {
 public:
  // Creates the temporary (0666 less the umask; the destination's mode, when it exists, is given at
  // commit). Throws OutputError when the folder does not take new files.
  explicit ReplacingFile(const std::string& destination);
  ~ReplacingFile();
  ReplacingFile(const ReplacingFile&) = delete;
  ReplacingFile& operator=(const ReplacingFile&) = delete;

  // Where the writer writes: the temporary, or the destination itself when it is not a regular file.
  const std::string& path() const { return write_path_; }
  // Flushes the written file to disk under its temporary name. Throws OutputError. A writer whose
  // result must appear together with others' (each rank's checkpoint) syncs first, then commits
  // once every one is on disk: the rename left to commit needs no space.
  void sync();
  // Flushes the written file to disk (unless sync() did) and renames it over the destination. Throws
  // OutputError.
  void commit();
  // `message` (a writer's error) with the temporary's name replaced by the destination's.
  std::string naming_destination(std::string message) const;

 private:
  std::string destination_;  // as given, for messages
  std::string target_;       // the file the rename replaces (a symlink's target)
  std::string write_path_;
  int mode_ = -1;            // the destination's permissions, when it exists
  bool in_place_ = false;
  bool synced_ = false;
  bool committed_ = false;
};

// A result too large to hold in memory first, written piece by piece into a ReplacingFile. A failed
// write does not throw: the first error is kept, later pieces are dropped, and commit() throws it. So
// a producer that must not see a failure midway (LibTorch's archive writer ends the process when its
// sink fails) writes to its end, and the destination is left as it was.
class ReplacingStream {
 public:
  explicit ReplacingStream(const std::string& destination);  // throws OutputError, as ReplacingFile
  ~ReplacingStream();
  ReplacingStream(const ReplacingStream&) = delete;
  ReplacingStream& operator=(const ReplacingStream&) = delete;
  void write(const void* data, std::size_t n) noexcept;  // appends
  // Overwrites bytes written before (a header that depends on what follows it). A destination that is
  // written in place and cannot seek (a FIFO) fails here.
  void write_at(std::uint64_t offset, const void* data, std::size_t n) noexcept;
  std::uint64_t size() const { return size_; }  // bytes appended so far
  // The first write error, or a failed flush, as OutputError naming the destination; nothing more
  // is written after it (ReplacingFile::sync).
  void sync();
  // The first write error, or a failed flush or rename, as OutputError naming the destination.
  void commit();

 private:
  void fail(int err) noexcept;

  ReplacingFile file_;
  int fd_ = -1;
  int error_ = 0;  // the first errno; nothing more is written once set
  std::uint64_t size_ = 0;
};

// Why `destination` could not be replaced whole, checked before any work ("" when it can): the
// folder of the file it leads to must take new files. '-' is refused: the tools whose outputs may go
// to standard output (memcomm-replay --json -, memcomm-trace export --chrome -) check for it first.
std::string replace_problem(const std::string& destination);

// The whole of `contents` into `destination`, replaced whole. Throws OutputError.
void write_replacing(const std::string& destination, std::string_view contents);

}  // namespace memcomm
