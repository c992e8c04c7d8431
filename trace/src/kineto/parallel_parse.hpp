// Note [Parsing beside the converter]
// Parsing an element with simdjson costs about twice what converting it does, and both are
// per element, so the reader splits the work: the splitter's thread copies elements into batches
// of about 1 MiB, worker threads parse whole batches (each with its own simdjson parser) into
// RawEvents whose texts they copy into the batch's own arena, and the splitter's thread converts
// finished batches strictly in file order, so the result is the one a single thread would give.
// At most kInFlight batches are queued, which bounds memory whatever the file's size. With one
// core the reader converts directly (Converter::event).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "converter.hpp"
#include "json_splitter.hpp"

namespace memcomm::prof::kineto {

class ParallelParse final : public SplitHandler {
 public:
  ParallelParse(Converter& converter, unsigned workers);
  ~ParallelParse() override;
  void member(std::string_view key, std::string_view raw_value) override;
  void event(std::string_view raw, size_t readable_after) override;
  // Parses and converts what is still queued; call once the splitter is done.
  void drain();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Worker threads worth starting on this machine (0: parse on the calling thread).
unsigned parse_workers();

}  // namespace memcomm::prof::kineto
