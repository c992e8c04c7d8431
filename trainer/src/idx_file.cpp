#include "idx_file.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>

namespace memcomm::train {

namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("IDX file " + path + ": " + what);
}

// Reads up to n bytes into buf; returns how many (0 at the end), or throws naming a read error.
using ReadFn = std::function<int64_t(uint8_t* buf, int64_t n)>;

std::string dims_text(const IdxArray& a) {
  std::string s;
  for (const int64_t d : a.dims) s += (s.empty() ? "" : " x ") + std::to_string(d);
  return s;
}

uint32_t read_be32(const ReadFn& read, const std::string& path) {
  unsigned char b[4];
  if (read(b, 4) != 4) fail(path, "truncated header");
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

IdxArray parse(const ReadFn& read, const std::string& path) {
  const uint32_t magic = read_be32(read, path);
  if ((magic >> 8) != 0x08) fail(path, "not an unsigned-byte IDX file (magic " + std::to_string(magic) + ")");
  const uint32_t ndims = magic & 0xff;
  if (ndims < 1 || ndims > 4) fail(path, "unsupported number of dimensions " + std::to_string(ndims));
  IdxArray a;
  int64_t total = 1;
  for (uint32_t i = 0; i < ndims; ++i) {
    const int64_t d = read_be32(read, path);
    a.dims.push_back(d);
    // Checked before multiplying: four 32-bit dimensions can overflow int64. A zero dimension makes
    // the product 0 whatever follows, an empty array.
    if (d != 0 && total > kMaxIdxElements / d) fail(path, "implausibly large dimensions");
    total *= d;
  }
  // The buffer grows with the data actually read (1 MiB at a time, geometric underneath), so a
  // short file whose header claims gigabytes fails as truncated without allocating them first.
  int64_t done = 0;
  while (done < total) {
    const int64_t want = std::min<int64_t>(total - done, int64_t(1) << 20);
    a.data.resize(static_cast<size_t>(done + want));
    const int64_t n = read(a.data.data() + done, want);
    if (n <= 0) fail(path, "truncated data: " + std::to_string(done) + " of " + std::to_string(total) + " bytes");
    done += n;
  }
  a.data.resize(static_cast<size_t>(total));
  // Bytes past what the header describes mean the header does not describe this file (another
  // format, or dimensions written wrong): reading on would train on the wrong cut of the data.
  uint8_t extra = 0;
  if (read(&extra, 1) > 0)
    fail(path, "more data than the " + std::to_string(total) + " bytes its header describes (dimensions " +
                   dims_text(a) + ")");
  return a;
}

}  // namespace

IdxArray read_idx_u8(const std::string& path) {
  // gzopen reads plain files transparently too.
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (!f) fail(path, "cannot be opened");
  const ReadFn read = [&f, &path](uint8_t* buf, int64_t n) -> int64_t {
    const int got = gzread(f.get(), buf, static_cast<unsigned>(n));
    int code = Z_OK;
    const char* message = gzerror(f.get(), &code);
    // A gzip stream that simply ends is a file cut short (the parser says how much came); broken
    // data or a failed read is named as such, not as truncation.
    if (got < 0 || (code != Z_OK && code != Z_BUF_ERROR))
      fail(path, std::string(code == Z_DATA_ERROR ? "corrupt gzip data: " : "read failed: ") + message);
    return got;
  };
  return parse(read, path);
}

IdxArray parse_idx_u8(const uint8_t* bytes, size_t size, const std::string& name) {
  size_t pos = 0;
  const ReadFn read = [&](uint8_t* buf, int64_t n) -> int64_t {
    const size_t k = std::min(static_cast<size_t>(n), size - pos);
    if (k > 0) std::memcpy(buf, bytes + pos, k);
    pos += k;
    return static_cast<int64_t>(k);
  };
  return parse(read, name);
}

void check_fashion_mnist(const IdxArray& images, const std::string& images_path, const IdxArray& labels,
                         const std::string& labels_path) {
  if (images.dims.size() != 3 || images.dims[1] != 28 || images.dims[2] != 28)
    fail(images_path, "Fashion-MNIST images are N x 28 x 28, this file holds " + dims_text(images));
  if (labels.dims.size() != 1) fail(labels_path, "Fashion-MNIST labels are a list of N, this file holds " + dims_text(labels));
  if (images.dims[0] < 1) fail(images_path, "holds no images");
  if (labels.dims[0] != images.dims[0])
    fail(labels_path, std::to_string(labels.dims[0]) + " labels for the " + std::to_string(images.dims[0]) +
                          " images of " + images_path);
  const auto bad = std::find_if(labels.data.begin(), labels.data.end(), [](uint8_t l) { return l >= 10; });
  if (bad != labels.data.end())
    fail(labels_path, "label " + std::to_string(*bad) + " at index " + std::to_string(bad - labels.data.begin()) +
                          " is not one of Fashion-MNIST's 10 classes");
}

}  // namespace memcomm::train
