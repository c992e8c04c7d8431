// Driving a policy with a device's request sequence, and the figures a replay reports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memcomm/replay/policy.hpp"
#include "memcomm/replay/requests.hpp"

namespace memcomm::replay {

// The pseudo-policy whose figures are what the traced allocator itself recorded (segment events):
// PyTorch's in a snapshot pickle, memcomm's own in an .mct trace.
inline constexpr const char* kRecordedPolicy = "recorded";

struct ReplayResult {
  std::string file;
  std::string format;                  // TraceRequests::format: "pytorch-snapshot" or "mct"
  int rank = kNoRank;                  // the device's rank (.mct traces); kNoRank when the format has none
  int device = 0;                      // device index (prof::kHostDevice = host memory)
  std::string policy;
  std::uint64_t peak_live = 0;         // largest live requested bytes (the trace's, same for every policy)
  std::uint64_t peak_reserved = 0;     // the policy's largest reserved bytes
  std::uint64_t peak_allocated = 0;    // the policy's largest allocated (rounded) bytes
  std::uint64_t ooms = 0;              // requests refused under the capacity
  std::uint64_t source_allocs = 0;     // segment allocations + page maps
  std::uint64_t source_frees = 0;      // segment frees + page unmaps
  std::uint64_t events = 0;            // trace events of the device
  std::uint64_t requests = 0;          // requests fed to the policy
  std::uint64_t traced_allocs = 0;     // DeviceRequests::traced_allocs(): 0 for an end state alone
  std::uint64_t call_bound = 0;        // ideal_calls(device, kCallBoundRatio), set by replay_all (0 elsewhere)
  double seconds = 0;                  // time spent in the policy's replay
  bool starts_empty = false;           // PyTorch's cache was empty when the trace began
  bool recorded_from_profile = false;  // DeviceRequests::recorded_from_profile

  double reserved_over_live() const { return peak_live ? double(peak_reserved) / double(peak_live) : 0.0; }
  // F = 1 - peak allocated / peak reserved (allocated = peak_live for `recorded`, which lacks rounding).
  double fragmentation() const { return peak_reserved ? 1.0 - double(peak_allocated) / double(peak_reserved) : 0.0; }
};

struct ReplayOptions {
  bool check = false;                   // verify no overlap and policy invariants while replaying (slow)
  std::uint64_t check_every = 4096;     // requests between full invariant checks when check is on
};

// Replays one device's requests through `policy`. Throws std::logic_error when `check` finds a
// broken invariant (overlapping blocks, a policy's own invariants).
ReplayResult replay_device(const TraceRequests& trace, const DeviceRequests& dev, Policy& policy,
                           const ReplayOptions& options = {});

// The `recorded` row: the traced allocator's own figures.
ReplayResult recorded_result(const TraceRequests& trace, const DeviceRequests& dev);

// Replays every device of `trace` under each named policy ("recorded" included), in that order.
std::vector<ReplayResult> replay_all(const TraceRequests& trace, const std::vector<std::string>& policies,
                                     std::uint64_t capacity, const ReplayOptions& options = {});

// Human-readable table and the JSON list (schema in docs of memcomm-replay --help). The table has a
// rank column when any result has a rank, and its legend says whose allocator `recorded` is, per
// trace format present.
std::string format_table(const std::vector<ReplayResult>& results);
std::string format_json(const std::vector<ReplayResult>& results);

}  // namespace memcomm::replay
