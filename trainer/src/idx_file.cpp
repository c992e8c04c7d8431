#include "idx_file.hpp"

#include <zlib.h>

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

uint32_t read_be32(gzFile f, const std::string& path) {
  unsigned char b[4];
  if (gzread(f, b, 4) != 4) fail(path, "truncated header");
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

}  // namespace

IdxArray read_idx_u8(const std::string& path) {
  // gzopen reads plain files transparently too.
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (!f) fail(path, "cannot be opened");
  const uint32_t magic = read_be32(f.get(), path);
  if ((magic >> 8) != 0x08) fail(path, "not an unsigned-byte IDX file (magic " + std::to_string(magic) + ")");
  const uint32_t ndims = magic & 0xff;
  if (ndims < 1 || ndims > 4) fail(path, "unsupported number of dimensions " + std::to_string(ndims));
  IdxArray a;
  int64_t total = 1;
  for (uint32_t i = 0; i < ndims; ++i) {
    a.dims.push_back(read_be32(f.get(), path));
    total *= a.dims.back();
    if (total > (int64_t(1) << 34)) fail(path, "implausibly large dimensions");
  }
  a.data.resize(static_cast<size_t>(total));
  int64_t done = 0;
  while (done < total) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(total - done, 1 << 30));
    const int n = gzread(f.get(), a.data.data() + done, chunk);
    if (n <= 0) fail(path, "truncated data: " + std::to_string(done) + " of " + std::to_string(total) + " bytes");
    done += n;
  }
  return a;
}

}  // namespace memcomm::train
