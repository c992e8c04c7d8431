// trace_hash: the chunk checksum of .mct files. XXH3 (Debian's libxxhash) runs at memory speed;
// it only has to catch corruption, not resist adversaries.
#include <xxhash.h>

#include <new>

#include "memcomm/trace/trace_format.hpp"

namespace memcomm::prof {

uint64_t trace_hash(const void* data, size_t n, uint64_t seed) { return XXH3_64bits_withSeed(data, n, seed); }

struct TraceHasher::State {
  XXH3_state_t* xxh = XXH3_createState();
  ~State() { XXH3_freeState(xxh); }
};

TraceHasher::TraceHasher(uint64_t seed) : state_(std::make_unique<State>()) {
  if (!state_->xxh) throw std::bad_alloc();
  XXH3_64bits_reset_withSeed(state_->xxh, seed);
}

TraceHasher::~TraceHasher() = default;

void TraceHasher::update(const void* data, size_t n) { XXH3_64bits_update(state_->xxh, data, n); }

uint64_t TraceHasher::digest() const { return XXH3_64bits_digest(state_->xxh); }

}  // namespace memcomm::prof
