// Memory sources: where a caching allocator gets its memory from (see Note [Memory sources]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace memcomm::alloc {

// Note [Memory sources]
// A source hands out memory in two ways, and says which it can do:
//  * allocate/deallocate: a whole, immediately usable segment (cudaMalloc, or a simulated one).
//  * reserve/release + map/unmap: a virtual range with no memory behind it, whose pages are backed
//    and given back one contiguous run at a time (cuMemMap, mmap). can_map() says whether the
//    source does this; the allocator then grows segments in place ("expandable segments").
// Sizes passed to allocate/reserve/map are multiples of granularity(); addresses passed to map/unmap
// are granularity-aligned and lie inside a range returned by reserve(). Running out of memory is not
// an error: allocate() returns nullptr and map() returns false, so the allocator can free its cache
// and retry. Anything else that goes wrong (a driver error, a misuse) throws SourceError.

// A failure of the source itself (driver error, bad argument), never "out of memory".
class SourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Calls made into a source and the bytes it backs now; the allocator's stats copy them.
struct SourceCounters {
  std::uint64_t allocs = 0;         // successful allocate() calls
  std::uint64_t frees = 0;          // deallocate() calls
  std::uint64_t reserves = 0;       // reserve() calls
  std::uint64_t releases = 0;       // release() calls
  std::uint64_t maps = 0;           // successful map() calls (each may map many pages)
  std::uint64_t unmaps = 0;         // unmap() calls
  std::uint64_t failed = 0;         // allocate()/map() calls refused for lack of memory
  std::uint64_t backed_bytes = 0;   // bytes now allocated or mapped (physical memory in use)
  std::uint64_t peak_backed_bytes = 0;  // largest backed_bytes seen
};

class MemorySource {
 public:
  virtual ~MemorySource() = default;

  // Short name: "host", "simulated", "cuda", "cuda-vmm".
  virtual const char* name() const = 0;
  // Device index reported in observer events (-1 for host memory).
  virtual int device() const { return -1; }
  // Page size: every size and mapped address is a multiple of it.
  virtual std::size_t granularity() const = 0;
  // Physical bytes the source can back at most; 0 means no limit.
  virtual std::size_t capacity() const = 0;
  // Whether reserve/release/map/unmap work (see Note [Memory sources]).
  virtual bool can_map() const = 0;
  // Whether addresses point at memory this process can touch (false for "simulated" and GPU memory).
  virtual bool host_accessible() const { return false; }

  // A whole segment of `bytes` (multiple of granularity), aligned to granularity; nullptr when out of memory.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) = 0;

  // A virtual range of `bytes` with nothing mapped; throws SourceError when impossible.
  virtual void* reserve(std::size_t bytes) { throw SourceError(std::string(name()) + ": cannot reserve virtual ranges"); }
  // Gives back a reserved range; every page in it must be unmapped already.
  virtual void release(void* base, std::size_t bytes) { throw SourceError(std::string(name()) + ": cannot release virtual ranges"); }
  // Backs [addr, addr+bytes) with memory in one call; false when out of memory (nothing mapped then).
  virtual bool map(void* addr, std::size_t bytes) { throw SourceError(std::string(name()) + ": cannot map pages"); }
  // Gives back the memory behind [addr, addr+bytes), which must have been mapped.
  virtual void unmap(void* addr, std::size_t bytes) { throw SourceError(std::string(name()) + ": cannot unmap pages"); }

  virtual SourceCounters counters() const = 0;
};

// Options understood by make_source; each source ignores what does not apply to it.
struct SourceOptions {
  std::size_t capacity = 0;              // physical bytes at most; 0 = unlimited (host: no cap, cuda: device size)
  std::size_t granularity = 2u << 20;    // page size for "simulated" (host uses the OS page size x 512 = 2 MiB by default)
  int device = 0;                        // CUDA device index ("simulated" reports it too)
};

// Builds a source by name: "host", "simulated", and any registered one ("cuda", "cuda-vmm" once
// register_cuda_sources() has run: Note [Sources by name]). Throws std::invalid_argument naming the
// unknown name and listing the known ones; throws SourceError when the source cannot work here
// (e.g. "cuda" without a GPU, or in a program that did not register the CUDA sources).
std::shared_ptr<MemorySource> make_source(const std::string& name, const SourceOptions& options = {});

// Adds a source that lives in another library to make_source. Thread-safe; a second registration of
// a name replaces the first.
using SourceFactory = std::shared_ptr<MemorySource> (*)(const SourceOptions&);
void register_source(const std::string& name, SourceFactory factory);

// Names make_source knows in this process: the built-in ones, then the registered ones.
std::vector<std::string> known_source_names();

}  // namespace memcomm::alloc
