// Microseconds as HTA rounds them (Note [HTA's figures] in hta.hpp), from memcomm's nanoseconds.
//
// Note [HTA's float64 microseconds]
// HTA reads a trace's timestamps with pandas. When any is a float, the column is float64 and every
// row is rounded: ts = ceil(ts), end = floor(ts + dur), the sum taken in float64. A Unix-epoch
// timestamp (~1.7e15 us) is a float64 only to 0.25 us, so ts + dur rounds to that spacing before
// the floor, and an end 0.9 us past a whole microsecond becomes the next one: on ns_resolution
// that moves idle time by 0.15 percentage point. The reader kept each timestamp's double exactly
// (Note [Microseconds to nanoseconds] in src/kineto/raw_event.hpp), so the file's own values are
// rebuilt here -- memcomm's ts + StartTime - baseTimeNanoseconds -- and HTA's double arithmetic is
// redone on them. Integer traces round exactly, on the file's origin too; traces not read from a
// torch.profiler file (an .mct) round memcomm's own nanoseconds.
#pragma once

#include <cmath>
#include <cstdint>

#include "memcomm/trace/kineto.hpp"
#include "memcomm/trace/trace_set.hpp"

namespace memcomm::prof {

class HtaClock {
 public:
  static HtaClock of(const TraceSet& set, const RankTrace& r) {
    HtaClock c;
    for (const FileLoadInfo& f : set.files)
      if (f.path == r.source && f.kineto) c.float64_ = f.kineto->float_timestamps, c.origin_ = origin(r, *f.kineto);
    return c;
  }
  int64_t ts_us(int64_t ts_ns) const {
    const int64_t t = ts_ns + origin_;
    return float64_ ? int64_t(std::ceil(to_double(t))) : -floor_div(-t, 1000);
  }
  int64_t end_us(int64_t ts_ns, int64_t end_ns) const {
    if (!float64_) return floor_div(end_ns + origin_, 1000);
    return int64_t(std::floor(to_double(ts_ns + origin_) + to_double(end_ns - ts_ns)));
  }

 private:
  static int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
  // ns -> the double of the us the file held: whole us exact, the fraction a multiple of 1 ns.
  static double to_double(int64_t ns) {
    const int64_t whole = floor_div(ns, 1000);
    return double(whole) + double(ns - whole * 1000) / 1000.0;
  }
  // ns to add to memcomm's timestamps to get the file's (Note [One origin for every torch.profiler
  // trace] in src/kineto/converter.hpp: StartTime is that origin).
  static int64_t origin(const RankTrace& r, const KinetoInfo& info) {
    int64_t start = 0;
    for (const Event& e : r.events)
      if (e.kind == EventKind::Meta && e.as<MetaEvent>().key == MetaKey::StartTime) start = e.as<MetaEvent>().value;
    return start - info.base_time_ns - r.clock_offset_ns;
  }

  bool float64_ = false;
  int64_t origin_ = 0;
};

}  // namespace memcomm::prof
