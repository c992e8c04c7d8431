// Where the reader's JSON bytes come from: a memory-mapped file, a caller's buffer, or a gzip file
// inflated on a second thread (Note [Inflating beside the parser]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace memcomm::prof::kineto {

class JsonBlocks {
 public:
  virtual ~JsonBlocks() = default;
  // The next block of JSON text; false at the end. A block stays valid until the next call.
  virtual bool next(std::string_view& block) = 0;
  // True when every block together is the whole input in one piece (the first block is all of it).
  virtual bool contiguous() const = 0;
  // True when the input ended early (a gzip stream cut short); what came before was delivered.
  virtual bool cut_short() const { return false; }
};

// Opens `path`: gzip (by its magic) is inflated on another thread, anything else is mapped.
// Throws TraceError naming the file when it cannot be opened or the gzip data is corrupt.
std::unique_ptr<JsonBlocks> open_json_blocks(const std::string& path, bool& gzip);
std::unique_ptr<JsonBlocks> buffer_blocks(std::string_view json);

}  // namespace memcomm::prof::kineto
