// Allocator policies a replay can drive. A policy sees each request only when it happens (online).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memcomm/snapshot/snapshot.hpp"

namespace memcomm::replay {

struct PolicyStats {
  std::uint64_t reserved = 0;        // bytes held from the (simulated) device now
  std::uint64_t peak_reserved = 0;   // largest `reserved`
  std::uint64_t allocated = 0;       // bytes of live blocks after rounding
  std::uint64_t peak_allocated = 0;  // largest `allocated`
  std::uint64_t source_allocs = 0;   // calls that acquire memory: segment allocations plus page maps
  std::uint64_t source_frees = 0;    // calls that give memory back: segment frees plus page unmaps
  std::uint64_t retries = 0;         // allocations that freed the cache and tried again
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  // The address of a block of at least `size` bytes for `stream`, or nullopt when the memory cap
  // leaves no room even after freeing the cache (an OOM). size > 0.
  virtual std::optional<std::uint64_t> allocate(std::uint64_t size, std::int64_t stream) = 0;
  // Frees a block returned by allocate().
  virtual void free(std::uint64_t addr) = 0;
  virtual PolicyStats stats() const = 0;
  // Throws std::logic_error naming the first broken internal invariant. O(blocks): for tests/--check.
  virtual void check_invariants() const {}
};

struct PolicyOptions {
  std::uint64_t capacity = 0;             // bytes the device has; 0 = unlimited
  snapshot::AllocatorSettings settings;   // the trace's recorded settings (max_split_size...)
  int device = 0;
};

// Policy names this build can make, in table order.
std::vector<std::string> policy_names();
// A short description of each, for --help.
std::string policy_help();
// Throws std::invalid_argument for an unknown name (listing the known ones).
std::unique_ptr<Policy> make_policy(std::string_view name, const PolicyOptions& options);

}  // namespace memcomm::replay
