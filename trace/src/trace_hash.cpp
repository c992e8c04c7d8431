// trace_hash: the chunk checksum of .mct files. XXH3 (Debian's libxxhash) runs at memory speed;
// it only has to catch corruption, not resist adversaries.
#include <xxhash.h>

#include "memcomm/trace/trace_format.hpp"

namespace memcomm::prof {

uint64_t trace_hash(const void* data, size_t n, uint64_t seed) { return XXH3_64bits_withSeed(data, n, seed); }

}  // namespace memcomm::prof
