// ReplacingFile: temporary beside the destination, fsync, rename (Note [Outputs replaced whole]).
#include "memcomm/common/replacing_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace memcomm {

namespace fs = std::filesystem;

namespace {

std::string why(const std::string& file, int err) { return "cannot write " + file + ": " + std::strerror(err); }

// The file a write to `path` lands in: a symlink's final target (which need not exist yet).
std::string resolved_target(const std::string& path) {
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec))) return path;
  const fs::path target = fs::weakly_canonical(path, ec);
  return ec ? path : target.string();
}

void fsync_file(const std::string& path, int flags, const std::string& destination) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw OutputError(why(destination, errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // A folder that cannot be fsynced (some network file systems) has still taken the rename.
  if (rc != 0 && !(flags & O_DIRECTORY)) throw OutputError(why(destination, err));
}

}  // namespace

ReplacingFile::ReplacingFile(const std::string& destination)
    : destination_(destination), target_(resolved_target(destination)) {
  struct stat st {};
  const bool exists = ::stat(target_.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    in_place_ = true;
    write_path_ = destination_;
    return;
  }
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    write_path_ = target_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    const int fd = ::open(write_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) throw OutputError(why(destination_, errno));
    if (exists) (void)::fchmod(fd, st.st_mode & 07777);  // keep the destination's permissions
    ::close(fd);
    return;
  }
  throw OutputError(why(destination_, EEXIST));
}

ReplacingFile::~ReplacingFile() {
  if (!committed_ && !in_place_) ::unlink(write_path_.c_str());
}

void ReplacingFile::commit() {
  if (committed_) return;
  if (in_place_) {
    committed_ = true;
    return;
  }
  fsync_file(write_path_, O_RDONLY, destination_);
  if (::rename(write_path_.c_str(), target_.c_str()) != 0) throw OutputError(why(destination_, errno));
  committed_ = true;
  const fs::path folder = fs::path(target_).parent_path();
  fsync_file(folder.empty() ? "." : folder.string(), O_RDONLY | O_DIRECTORY, destination_);
}

void write_replacing(const std::string& destination, std::string_view contents) {
  ReplacingFile file(destination);
  const int fd = ::open(file.path().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) throw OutputError(why(destination, errno));
  const char* p = contents.data();
  std::size_t left = contents.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      throw OutputError(why(destination, err));
    }
    p += n;
    left -= std::size_t(n);
  }
  if (::close(fd) != 0) throw OutputError(why(destination, errno));
  file.commit();
}

}  // namespace memcomm
