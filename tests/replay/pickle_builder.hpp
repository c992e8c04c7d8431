// Builds pickle byte strings opcode by opcode, for tests of the data-only reader.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace memcomm::test {

class PickleBuilder {
 public:
  PickleBuilder& op(std::uint8_t o) { return raw(o); }
  PickleBuilder& raw(std::uint8_t b) {
    bytes_.push_back(b);
    return *this;
  }
  PickleBuilder& le(std::uint64_t v, int n) {
    for (int k = 0; k < n; ++k) bytes_.push_back(static_cast<std::uint8_t>(v >> (8 * k)));
    return *this;
  }
  PickleBuilder& text(const std::string& s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  PickleBuilder& proto(int p = 4) { return op(0x80).raw(static_cast<std::uint8_t>(p)); }
  PickleBuilder& str(const std::string& s) {  // SHORT_BINUNICODE or BINUNICODE
    if (s.size() < 256) return op(0x8c).le(s.size(), 1).text(s);
    return op('X').le(s.size(), 4).text(s);
  }
  PickleBuilder& integer(std::int64_t v) {  // the opcode Python would pick
    if (v >= 0 && v < 256) return op('K').le(static_cast<std::uint64_t>(v), 1);
    if (v >= 0 && v < 65536) return op('M').le(static_cast<std::uint64_t>(v), 2);
    if (v >= INT32_MIN && v <= INT32_MAX) return op('J').le(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
    return op(0x8a).raw(8).le(static_cast<std::uint64_t>(v), 8);
  }
  PickleBuilder& none() { return op('N'); }
  PickleBuilder& boolean(bool b) { return op(b ? 0x88 : 0x89); }
  PickleBuilder& empty_dict() { return op('}'); }
  PickleBuilder& empty_list() { return op(']'); }
  PickleBuilder& mark() { return op('('); }
  PickleBuilder& setitems() { return op('u'); }
  PickleBuilder& appends() { return op('e'); }
  PickleBuilder& memoize() { return op(0x94); }
  PickleBuilder& binget(std::uint8_t i) { return op('h').raw(i); }
  PickleBuilder& long_binget(std::uint32_t i) { return op('j').le(i, 4); }
  PickleBuilder& stop() { return op('.'); }
  // key/value helpers for dict bodies between mark() and setitems()
  PickleBuilder& kv(const std::string& k, std::int64_t v) { return str(k).integer(v); }
  PickleBuilder& kv(const std::string& k, const std::string& v) { return str(k).str(v); }

  const std::vector<std::uint8_t>& bytes() const { return bytes_; }
  const std::uint8_t* data() const { return bytes_.data(); }
  std::size_t size() const { return bytes_.size(); }

 private:
  std::vector<std::uint8_t> bytes_;
};

inline std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> out;
  for (std::size_t k = 0; k + 1 < hex.size(); k += 2) out.push_back(static_cast<std::uint8_t>(std::stoul(hex.substr(k, 2), nullptr, 16)));
  return out;
}

}  // namespace memcomm::test
