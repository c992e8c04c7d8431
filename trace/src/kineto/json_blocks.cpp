// JSON sources for the Kineto reader.
//
// Note [Inflating beside the parser]
// A gzip trace is inflated by a producer thread into 4 MiB blocks that the parser takes from a
// queue of at most four, so the two stages overlap (zlib inflates at roughly the speed the parser
// reads) and memory stays bounded whatever the file's size. The producer stops early when the
// reader is destroyed; its errors are handed to the parser and thrown from next(), after the
// blocks that were good. A gzip stream that simply ends (a killed job's file) is not an error: the
// reader sees cut_short() and reports how far the JSON got.
#include "json_blocks.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "memcomm/common/input_file.hpp"
#include "memcomm/trace/trace_error.hpp"

namespace memcomm::prof::kineto {
namespace {

class BufferBlocks final : public JsonBlocks {
 public:
  explicit BufferBlocks(std::string_view data) : data_(data) {}
  bool next(std::string_view& block) override {
    if (done_) return false;
    done_ = true;
    block = data_;
    return true;
  }
  bool contiguous() const override { return true; }

 private:
  std::string_view data_;
  bool done_ = false;
};

class MappedBlocks final : public JsonBlocks {
 public:
  MappedBlocks(void* map, size_t size) : map_(map), size_(size) {}
  ~MappedBlocks() override {
    if (map_) munmap(map_, size_);
  }
  bool next(std::string_view& block) override {
    if (done_) return false;
    done_ = true;
    block = std::string_view(static_cast<const char*>(map_), size_);
    return true;
  }
  bool contiguous() const override { return true; }

 private:
  void* map_;
  size_t size_;
  bool done_ = false;
};

class GzipBlocks final : public JsonBlocks {
 public:
  GzipBlocks(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
    worker_ = std::thread([this] { produce(); });
  }
  ~GzipBlocks() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    close(fd_);
  }
  bool next(std::string_view& block) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || finished_; });
    if (queue_.empty()) {
      if (!error_.empty()) throw TraceError(error_);
      return false;
    }
    if (current_.capacity()) spare_.push_back(std::move(current_));  // the producer refills it
    current_ = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    block = current_;
    return true;
  }
  bool contiguous() const override { return false; }
  bool cut_short() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return cut_short_;
  }

 private:
  static constexpr size_t kBlock = size_t(4) << 20;
  static constexpr size_t kQueued = 4;

  // A block-sized buffer: a spare one when the parser has handed one back.
  std::string buffer() {
    std::string b;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!spare_.empty()) {
        b = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    b.resize(kBlock);
    return b;
  }
  bool push(std::string&& block) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() < kQueued || stop_; });
    if (stop_) return false;
    queue_.push_back(std::move(block));
    cv_.notify_all();
    return true;
  }
  void finish(std::string error, bool cut_short) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
    cut_short_ = cut_short;
    finished_ = true;
    cv_.notify_all();
  }
  void produce() {
    try {
      inflate_all();
    } catch (const std::exception& e) {
      finish(e.what(), false);
    }
  }
  void inflate_all();

  int fd_;
  std::string path_;
  std::thread worker_;
  std::string current_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::vector<std::string> spare_;  // blocks the parser is done with, to be refilled
  bool stop_ = false, finished_ = false, cut_short_ = false;
  std::string error_;
};

// zlib's inflate state, ended on every way out (a corrupt stream throws from the loop below).
struct Inflater {
  z_stream z{};
  bool started = false;
  Inflater() = default;
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  ~Inflater() {
    if (started) inflateEnd(&z);
  }
};

void GzipBlocks::inflate_all() {
  Inflater inflater;
  z_stream& z = inflater.z;
  if (inflateInit2(&z, 15 + 32) != Z_OK) throw TraceError(fmt::format("{}: cannot start zlib", path_));
  inflater.started = true;
  std::string in(size_t(1) << 20, '\0');
  std::string out = buffer();
  uint64_t consumed = 0;
  bool in_member = false, eof = false;
  int rc = Z_OK;
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  while (true) {
    if (z.avail_in == 0 && !eof) {
      const ssize_t n = read(fd_, in.data(), in.size());
      if (n < 0) throw TraceError(fmt::format("{}: read failed: {}", path_, std::strerror(errno)));
      eof = n == 0;
      z.next_in = reinterpret_cast<Bytef*>(in.data());
      z.avail_in = uInt(n);
    }
    if (z.avail_in == 0 && eof) break;
    const uInt before = z.avail_in;
    rc = inflate(&z, Z_NO_FLUSH);
    consumed += before - z.avail_in;
    in_member = rc != Z_STREAM_END;
    if (rc == Z_STREAM_END) inflateReset(&z);  // a concatenated gzip member may follow
    else if (rc != Z_OK && rc != Z_BUF_ERROR)
      throw TraceError(fmt::format("{}: gzip data corrupt near compressed byte {}: {}", path_, consumed,
                                   z.msg ? z.msg : "inflate failed"));
    if (z.avail_out == 0 || (rc == Z_STREAM_END && z.avail_in == 0 && eof)) {
      out.resize(out.size() - z.avail_out);
      if (!push(std::move(out))) break;
      out = buffer();
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = uInt(out.size());
    }
  }
  out.resize(out.size() - z.avail_out);
  if (!out.empty()) push(std::move(out));
  finish("", in_member && consumed > 0);
}

}  // namespace

std::unique_ptr<JsonBlocks> buffer_blocks(std::string_view json) { return std::make_unique<BufferBlocks>(json); }

std::unique_ptr<JsonBlocks> open_json_blocks(const std::string& path, bool& gzip) {
  if (const std::string problem = input_file_problem(path); !problem.empty())
    throw TraceError(fmt::format("{}: {}", path, problem));
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw TraceError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    throw TraceError(fmt::format("{}: not a regular file", path));
  }
  unsigned char magic[2] = {0, 0};
  gzip = pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (gzip) return std::make_unique<GzipBlocks>(fd, path);
  const size_t size = size_t(st.st_size);
  void* map = size ? mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
  close(fd);
  if (map == MAP_FAILED) throw TraceError(fmt::format("{}: cannot map: {}", path, std::strerror(errno)));
  if (map) madvise(map, size, MADV_SEQUENTIAL);
  return std::make_unique<MappedBlocks>(map, size);
}

}  // namespace memcomm::prof::kineto
