// A data-only pickle reader.
//
// Note [Data-only pickles]: PyTorch memory snapshots are pickles of plain dicts, lists, tuples,
// strings, ints, floats, bools and None. Python's own unpickler can run arbitrary code through
// GLOBAL/REDUCE; this reader never resolves a global or calls anything. Opcodes that would
// (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID, EXT*,
// NEXT_BUFFER, READONLY_BUFFER) are rejected with a ReadError naming the opcode and its offset.
//
// Note [Compact values]: a decoded document is a flat arena. A Value is 16 bytes: scalars live
// inline, strings point into one character arena and containers into one container table. The
// memo shares objects exactly as the pickle does (a frame dict referenced 10,000 times is stored
// once), so loading a 4 MB snapshot allocates a few tens of thousands of small vectors at most.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memcomm/snapshot/error.hpp"

namespace memcomm::snapshot::pickle {

enum class Kind : std::uint8_t {
  none,
  boolean,
  integer,  // fits in int64
  big_int,  // LONG1/LONG4 wider than 64 bits: kept as its little-endian two's-complement bytes
  floating,
  string,   // str (UTF-8 as written by the pickle)
  bytes,    // bytes, bytearray and protocol-0/1 byte strings
  list,
  tuple,
  dict,
  set,      // set and frozenset
};

const char* kind_name(Kind k) noexcept;

struct Value {
  Kind kind = Kind::none;
  // string/bytes/big_int: index into Document's text table; containers: index into its container table.
  std::uint32_t ref = 0;
  union {
    std::int64_t i;  // integer, boolean (0/1)
    double f;        // floating
  };
  Value() : i(0) {}

  bool is_none() const noexcept { return kind == Kind::none; }
  bool is_container() const noexcept {
    return kind == Kind::list || kind == Kind::tuple || kind == Kind::dict || kind == Kind::set;
  }
};
static_assert(sizeof(Value) == 16, "Value must stay 16 bytes: a snapshot holds a million of them");

// A list, tuple, set or dict. Dicts store keys and values interleaved: items[2k] -> items[2k+1].
struct Container {
  Kind kind = Kind::list;
  std::vector<Value> items;
};

class Document {
 public:
  const Value& root() const noexcept { return root_; }
  const std::string& source() const noexcept { return source_; }

  std::string_view text(const Value& v) const;  // string, bytes or big_int bytes
  const Container& container(const Value& v) const;
  std::size_t container_count() const noexcept { return containers_.size(); }

  // Dict helpers: the value under a string key, or nullptr. Linear: snapshot dicts have < 16 keys.
  const Value* find(const Value& dict, std::string_view key) const;
  std::size_t dict_size(const Value& dict) const { return container(dict).items.size() / 2; }

  // Checked accessors: throw ReadError (with the document's source name) on a kind mismatch.
  std::int64_t as_int(const Value& v, std::string_view what) const;
  double as_number(const Value& v, std::string_view what) const;  // int, bool or float
  bool as_bool(const Value& v, std::string_view what) const;
  std::string_view as_string(const Value& v, std::string_view what) const;
  const Container& as_container(const Value& v, Kind kind, std::string_view what) const;
  const Container& as_sequence(const Value& v, std::string_view what) const;  // list or tuple

  // A short Python-like rendering for messages and tests (depth- and length-limited, cycle-safe).
  std::string repr(const Value& v, int depth = 3) const;

 private:
  friend class Reader;
  std::string source_;
  Value root_;
  std::string chars_;                                       // every string/bytes payload, back to back
  std::vector<std::pair<std::uint32_t, std::uint32_t>> texts_;  // (offset, length) into chars_
  std::vector<Container> containers_;
};

struct LoadOptions {
  // Called every ~1 MiB of input with (bytes read, total); for progress display on large files.
  void (*progress)(std::uint64_t done, std::uint64_t total, void* user) = nullptr;
  void* progress_user = nullptr;
  // Hard limits that keep hostile input from exhausting memory.
  std::uint64_t max_memo_index = std::uint64_t{1} << 32;  // memo indices are at most 32-bit in pickles
  std::uint64_t max_stack_depth = 1u << 24;
};

// Decodes one pickle (protocol 0-5 data opcodes). `source` names the input in error messages.
// Throws ReadError with the byte offset of the offending opcode on any malformed, truncated or
// non-data input. Trailing bytes after STOP are ignored, as Python does.
Document load(const void* data, std::size_t size, std::string source, const LoadOptions& options = {});

}  // namespace memcomm::snapshot::pickle
