// ReplacingFile: temporary beside the destination, fsync, rename (Note [Outputs replaced whole]).
#include "memcomm/common/replacing_file.hpp"

#include "memcomm/common/output_path.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

namespace memcomm {

namespace fs = std::filesystem;

namespace {

std::string why(const std::string& file, int err) { return "cannot write " + file + ": " + std::strerror(err); }

bool under_system_folder(const fs::path& p) {
  const std::string s = p.lexically_normal().string();
  return s.rfind("/dev/", 0) == 0 || s.rfind("/proc/", 0) == 0;
}

// Where a write to `path` lands: the end of its symlink chain, which need not exist yet. Empty when
// the path is, or leads to, a system file (/dev/stdout, /proc/self/fd/N): those are written in place.
fs::path resolved_target(const std::string& path) {
  fs::path p = path;
  for (int hop = 0; hop < 40; ++hop) {
    if (under_system_folder(p)) return {};
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p;
    const fs::path next = fs::read_symlink(p, ec);
    if (ec) return p;
    p = next.is_absolute() ? next : p.parent_path() / next;
  }
  return p;  // a loop: the rename then fails and says so
}

// Whether a write to `target` (resolved_target's) goes to it directly: a system file, or an existing
// one that is not a regular file (a device, a FIFO; a folder, whose open then fails saying so).
bool written_in_place(const fs::path& target) {
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  return target.empty() || (fs::exists(st) && !fs::is_regular_file(st));
}

// This machine's name as temporaries carry it: no '/' or '.' (the name is read back from its right),
// at most 32 characters; a longer name keeps its first 23 and a hash of the whole, so that pods whose
// names share a long prefix still differ.
std::string make_host_tag() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "host";
  std::string h(buf);
  std::replace(h.begin(), h.end(), '/', '_');
  std::replace(h.begin(), h.end(), '.', '_');
  if (h.size() <= 32) return h;
  std::uint32_t fnv = 2166136261u;  // FNV-1a of the whole name
  for (const char c : std::string(buf)) fnv = (fnv ^ std::uint8_t(c)) * 16777619u;
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", fnv);
  return h.substr(0, 23) + "-" + hex;
}

// Asked of the system once: every temporary made and every one looked at names this machine.
const std::string& host_tag() {
  static const std::string tag = make_host_tag();
  return tag;
}

// What every temporary of `target` made on this machine begins with: NAME.tmp.HOST., the name short
// enough that the whole stays within NAME_MAX whatever the target's length.
std::string temporary_prefix(const fs::path& target) {
  return target.filename().string().substr(0, 160) + ".tmp." + host_tag() + ".";
}

// The temporary's name: beside the target, NAME.tmp.HOST.PID.N.
std::string temporary_name(const fs::path& target, unsigned n) {
  return (target.parent_path() / (temporary_prefix(target) + std::to_string(::getpid()) + "." + std::to_string(n)))
      .string();
}

// The process id in `name` when it begins with `prefix` (temporary_prefix's) followed by PID.N; else 0.
pid_t temporary_owner(const std::string& prefix, const std::string& name) {
  if (name.rfind(prefix, 0) != 0) return 0;
  const std::string rest = name.substr(prefix.size());  // PID.N
  const auto dot = rest.find('.');
  if (dot == 0 || dot == std::string::npos || rest.find_first_not_of("0123456789.") != std::string::npos) return 0;
  const long pid = std::strtol(rest.c_str(), nullptr, 10);
  return pid > 0 && pid <= std::numeric_limits<pid_t>::max() ? pid_t(pid) : 0;
}

// Note [Abandoned temporaries]
// A writer killed before commit leaves its temporary (Note [Outputs replaced whole]), and a run that
// is killed and restarted again and again, as jobs on a cluster are, would pile one up per kill, each
// as large as a checkpoint. So making a temporary removes those of the same destination that were made
// on this machine (the host in the name: a folder may be shared by several) by a process that no
// longer exists, and that nothing has written for kAbandonedAfter: a process of another PID namespace
// on the same host (a container) looks dead from here, but a live writer keeps its file's time fresh.
constexpr auto kAbandonedAfter = std::chrono::minutes(10);

void remove_abandoned_temporaries(const fs::path& target) {
  std::error_code ec;
  const fs::path folder = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = temporary_prefix(target);
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const pid_t owner = temporary_owner(prefix, it->path().filename().string());
    if (owner == 0 || owner == ::getpid() || ::kill(owner, 0) == 0 || errno != ESRCH) continue;
    std::error_code time_ec;
    const auto written = fs::last_write_time(it->path(), time_ec);
    if (!time_ec && fs::file_time_type::clock::now() - written > kAbandonedAfter) ::unlink(it->path().c_str());
  }
}

}  // namespace

std::string replace_problem(const std::string& destination) {
  if (destination == "-") return "'-' is no file here (this output goes to a file, not to standard output)";
  const fs::path target = resolved_target(destination);
  std::error_code ec;
  if (fs::is_directory(target, ec)) return destination + " is a folder, not a file";
  if (written_in_place(target)) return "";  // its own errors are reported when writing
  const fs::path folder = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  if (!fs::is_directory(folder, ec)) return "the folder " + folder.string() + " does not exist";
  if (!can_create_in(folder)) return "the folder " + folder.string() + " does not take new files";
  return name_length_problem(target.string());
}

ReplacingFile::ReplacingFile(const std::string& destination) : destination_(destination) {
  const fs::path target = resolved_target(destination);
  if (written_in_place(target)) {
    in_place_ = true;
    write_path_ = destination_;
    return;
  }
  target_ = target.string();
  remove_abandoned_temporaries(target);  // Note [Abandoned temporaries]
  struct stat st {};
  if (::stat(target_.c_str(), &st) == 0) mode_ = st.st_mode & 07777;
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    write_path_ = temporary_name(target, counter++);
    const int fd = ::open(write_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) throw OutputError(why(destination_, errno));
    ::close(fd);
    return;
  }
  throw OutputError(why(destination_, EEXIST));
}

ReplacingFile::~ReplacingFile() {
  if (!committed_ && !in_place_) ::unlink(write_path_.c_str());
}

void ReplacingFile::sync() {
  if (synced_ || in_place_) return;
  const int fd = ::open(write_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw OutputError(why(destination_, errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw OutputError(why(destination_, err));
  synced_ = true;
}

void ReplacingFile::commit() {
  if (committed_) return;
  if (in_place_) {
    committed_ = true;
    return;
  }
  sync();
  // The destination's permissions, set only now: a read-only mode on the temporary would have
  // stopped the writer.
  if (mode_ >= 0) (void)::chmod(write_path_.c_str(), static_cast<mode_t>(mode_));
  if (::rename(write_path_.c_str(), target_.c_str()) != 0) throw OutputError(why(destination_, errno));
  committed_ = true;
  // The rename is done; a folder that cannot be opened or synced (a write-only folder, some network
  // file systems) changes nothing about the result.
  const fs::path folder = fs::path(target_).parent_path();
  const int dir = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

std::string ReplacingFile::naming_destination(std::string message) const {
  for (std::size_t at = message.find(write_path_); !in_place_ && at != std::string::npos; at = message.find(write_path_, at))
    message.replace(at, write_path_.size(), destination_);
  return message;
}

ReplacingStream::ReplacingStream(const std::string& destination) : file_(destination) {
  fd_ = ::open(file_.path().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd_ < 0) throw OutputError(why(destination, errno));
}

ReplacingStream::~ReplacingStream() {
  if (fd_ >= 0) ::close(fd_);
}

void ReplacingStream::fail(int err) noexcept {
  if (error_ == 0) error_ = err;
}

void ReplacingStream::write(const void* data, std::size_t n) noexcept {
  const char* p = static_cast<const char*>(data);
  while (n > 0 && error_ == 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return fail(w < 0 ? errno : EIO);
    p += w;
    n -= std::size_t(w);
    size_ += std::uint64_t(w);
  }
}

void ReplacingStream::write_at(std::uint64_t offset, const void* data, std::size_t n) noexcept {
  const char* p = static_cast<const char*>(data);
  while (n > 0 && error_ == 0) {
    const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return fail(w < 0 ? errno : EIO);
    p += w;
    n -= std::size_t(w);
    offset += std::uint64_t(w);
  }
}

void ReplacingStream::sync() {
  const int fd = fd_;
  fd_ = -1;
  if (fd >= 0 && ::close(fd) != 0) fail(errno);
  if (error_ != 0) throw OutputError(file_.naming_destination(why(file_.path(), error_)));
  file_.sync();
}

void ReplacingStream::commit() {
  sync();
  file_.commit();
}

void write_replacing(const std::string& destination, std::string_view contents) {
  ReplacingStream out(destination);
  out.write(contents.data(), contents.size());
  out.commit();
}

}  // namespace memcomm
