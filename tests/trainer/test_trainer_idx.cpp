// The IDX reader (Fashion-MNIST's files): hostile headers are errors naming the file, never an
// overflow or a huge allocation, and Fashion-MNIST's shape and labels are checked at load time.
#include "idx_file.hpp"
#include "memcomm_test.hpp"

#include <catch2/catch.hpp>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

using namespace memcomm::train;

namespace {

std::vector<uint8_t> idx(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (const uint32_t d : dims)
    for (const int shift : {24, 16, 8, 0}) b.push_back(static_cast<uint8_t>(d >> shift));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    parse_idx_u8(bytes.data(), bytes.size(), "mem.idx");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "accepted";
}

std::string fashion_error(const IdxArray& images, const IdxArray& labels) {
  try {
    check_fashion_mnist(images, "img.gz", labels, "lab.gz");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("an IDX file parses from memory as from disk") {
  const auto bytes = idx({2, 3}, {1, 2, 3, 4, 5, 6});
  const IdxArray a = parse_idx_u8(bytes.data(), bytes.size(), "mem.idx");
  CHECK(a.dims == std::vector<int64_t>{2, 3});
  CHECK(a.data == std::vector<uint8_t>{1, 2, 3, 4, 5, 6});
  const auto path = std::filesystem::temp_directory_path() / "memcomm-test-idx-plain.idx";
  { std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size())); }
  const IdxArray f = read_idx_u8(path.string());  // plain (not gzipped) files read too
  std::filesystem::remove(path);
  CHECK(f.dims == a.dims);
  CHECK(f.data == a.data);
}

TEST_CASE("dimensions whose product overflows are refused before any allocation") {
  // 0xFFFFFFFF^2 fits int64, ^3 does not: both far above the limit, and neither may wrap.
  for (const auto& dims : {std::vector<uint32_t>{0xFFFFFFFFu, 0xFFFFFFFFu},
                           std::vector<uint32_t>{0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu},
                           std::vector<uint32_t>{1u << 17, 1u << 17, 2}}) {
    const std::string e = error_of(idx(dims, {}));
    INFO(e);
    CHECK(e.find("mem.idx") != std::string::npos);
    CHECK(e.find("implausibly large") != std::string::npos);
  }
  // A zero dimension is an empty array, whatever comes after it.
  const auto empty = idx({0, 0xFFFFFFFFu, 0xFFFFFFFFu}, {});
  CHECK(parse_idx_u8(empty.data(), empty.size(), "mem.idx").data.empty());
}

TEST_CASE("truncated and foreign IDX input is an error naming the file") {
  CHECK(error_of({}).find("truncated header") != std::string::npos);
  CHECK(error_of({0, 0, 0x0D, 1, 0, 0, 0, 1, 0, 0, 0, 0}).find("not an unsigned-byte IDX") != std::string::npos);
  CHECK(error_of(idx({}, {})).find("number of dimensions") != std::string::npos);
  CHECK(error_of(idx({10}, {1, 2, 3})).find("truncated data: 3 of 10") != std::string::npos);
  CHECK(error_of(idx({2, 2}, {1, 2, 3, 4, 5})).find("more data than the 4 bytes its header describes (dimensions 2 x 2)") !=
        std::string::npos);
}

TEST_CASE("a gzip IDX file with broken data says so, and one cut short is truncated") {
  const auto bytes = idx({64, 64}, std::vector<uint8_t>(64 * 64, 7));
  const auto path = std::filesystem::temp_directory_path() / "memcomm-test-idx.gz";
  const auto write = [&](const std::string& gz) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(gz.data(), std::streamsize(gz.size()));
  };
  const auto read_error = [&] {
    try {
      read_idx_u8(path.string());
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  {
    gzFile f = gzopen(path.string().c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
    gzclose(f);
  }
  std::string gz;
  {
    std::ifstream in(path, std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  CHECK(read_idx_u8(path.string()).data == std::vector<uint8_t>(bytes.begin() + 12, bytes.end()));
  write(gz.substr(0, gz.size() / 2));
  CHECK(read_error().find("truncated") != std::string::npos);
  std::string corrupt = gz;
  for (size_t i = 12; i < corrupt.size() - 8; ++i) corrupt[i] = char(~corrupt[i]);
  write(corrupt);
  const std::string e = read_error();
  INFO(e);
  CHECK(e.find(path.string() + ": corrupt gzip data") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("Fashion-MNIST's shape and labels are checked, naming the file at fault") {
  IdxArray images{{2, 28, 28}, std::vector<uint8_t>(2 * 784)};
  IdxArray labels{{2}, {3, 9}};
  CHECK(fashion_error(images, labels) == "accepted");

  IdxArray bad_labels{{2}, {3, 10}};
  std::string e = fashion_error(images, bad_labels);
  CHECK(e.find("lab.gz") != std::string::npos);
  CHECK(e.find("label 10 at index 1") != std::string::npos);

  IdxArray small{{2, 27, 28}, std::vector<uint8_t>(2 * 27 * 28)};
  e = fashion_error(small, labels);
  CHECK(e.find("img.gz") != std::string::npos);
  CHECK(e.find("2 x 27 x 28") != std::string::npos);

  IdxArray few{{1}, {0}};
  e = fashion_error(images, few);
  CHECK(e.find("lab.gz") != std::string::npos);
  CHECK(e.find("1 labels for the 2 images") != std::string::npos);

  IdxArray none{{0, 28, 28}, {}};
  CHECK(fashion_error(none, IdxArray{{0}, {}}).find("holds no images") != std::string::npos);
  CHECK(fashion_error(labels, labels).find("img.gz") != std::string::npos);  // 1-d "images"
}
