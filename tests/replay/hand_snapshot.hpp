// A hand-built PyTorch snapshot pickle with every awkward feature (see snapshot_test.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "memcomm_test.hpp"
#include "pickle_builder.hpp"

namespace memcomm::test {

struct Ev {
  const char* action;
  std::int64_t addr;  // -1: no addr key
  std::int64_t size;
  std::int64_t time_us;  // -1: no time_us key
  bool frames;
};

inline void frames_list(PickleBuilder& b, bool first) {
  // Two frames: a C++ unwinder frame (line 0) and a Python one. The Python frame dict is
  // memoized at index 1 the first time and shared afterwards.
  b.empty_list().mark();
  b.empty_dict().mark().kv("name", "torch::unwind::unwind()").kv("filename", "??").kv("line", 0).setitems();
  if (first) {
    b.empty_dict().op('q').raw(1).mark().kv("name", "forward").kv("filename", "model.py").kv("line", 42).setitems();
  } else {
    b.binget(1);
  }
  b.appends();
}

inline void event(PickleBuilder& b, const Ev& e, bool& first_frames) {
  b.empty_dict().mark().kv("action", e.action);
  if (e.addr >= 0) b.kv("addr", e.addr);
  b.kv("size", e.size).kv("stream", 0);
  if (e.time_us >= 0) b.kv("time_us", e.time_us);
  b.kv("compile_context", "N/A");  // an extra field newer files carry
  if (e.frames) {
    b.str("frames");
    frames_list(b, first_frames);
    first_frames = false;
  }
  b.setitems();
}

// timed = false: device 0's events carry no time_us either, as in torch <= 2.1's files.
inline std::vector<std::uint8_t> build_snapshot(bool timed = true) {
  const auto at = [timed](std::int64_t us) { return timed ? us : std::int64_t{-1}; };
  PickleBuilder b;
  bool first_frames = true;
  b.proto(4).empty_dict().mark();
  // --- segments ---
  b.str("segments").empty_list().mark();
  b.empty_dict().mark().kv("device", 0).kv("address", 16 * MiB).kv("total_size", 2 * MiB).kv("stream", 0);
  b.kv("segment_type", "small").str("segment_pool_id").integer(0).integer(0).op(0x86);
  b.str("is_expandable").boolean(false);
  b.str("blocks").empty_list().mark();
  b.empty_dict().mark().kv("address", 16 * MiB).kv("size", 1024).kv("requested_size", 1000).kv("state", "active_allocated").setitems();
  b.empty_dict().mark().kv("size", 2 * MiB - 1024).kv("requested_size", 0).kv("state", "inactive").setitems();  // no address: implicit
  b.appends().setitems();
  b.empty_dict().mark().kv("device", 2).kv("address", 1024 * MiB).kv("total_size", 40 * MiB).kv("stream", 0);
  b.kv("segment_type", "large").str("is_expandable").boolean(true);
  b.str("blocks").empty_list().mark();
  b.empty_dict().mark().kv("address", 1024 * MiB).kv("size", 40 * MiB).kv("requested_size", 0).kv("state", "inactive").setitems();
  b.appends().setitems();
  b.appends();
  // --- device traces ---
  b.str("device_traces").empty_list().mark();
  b.empty_list().mark();  // device 0
  event(b, {"free_completed", 5 * MiB, 3000, at(10), false}, first_frames);  // predates the trace
  event(b, {"alloc", 6 * MiB, 5000, at(11), true}, first_frames);
  event(b, {"snapshot", 0, 0, at(12), false}, first_frames);
  event(b, {"free_requested", 6 * MiB, 5000, at(13), true}, first_frames);
  event(b, {"free_completed", 6 * MiB, 5000, at(14), false}, first_frames);
  event(b, {"future_action", 1, 1, at(15), false}, first_frames);
  b.appends();
  b.empty_list();  // device 1: nothing
  b.empty_list().mark();  // device 2: expandable, no time_us
  event(b, {"segment_map", 1024 * MiB, 40 * MiB, -1, false}, first_frames);
  event(b, {"alloc", 1024 * MiB, 30 * MiB, -1, true}, first_frames);
  event(b, {"oom", -1, 1024 * MiB, -1, false}, first_frames);
  event(b, {"free_completed", 1024 * MiB, 30 * MiB, -1, false}, first_frames);
  event(b, {"segment_unmap", 1044 * MiB, 20 * MiB, -1, false}, first_frames);
  event(b, {"segment_map", 1044 * MiB, 20 * MiB, -1, false}, first_frames);
  b.appends();
  b.appends();
  // --- settings ---
  b.str("allocator_settings").empty_dict().mark().kv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True");
  b.kv("max_split_size", -1).str("expandable_segments").boolean(true);
  b.str("roundup_power2_divisions").empty_dict().mark().kv("1", 0).kv("2", 4).setitems();
  b.setitems();
  b.str("external_annotations").empty_list();
  b.setitems().stop();
  return b.bytes();
}


}  // namespace memcomm::test
