// simdjson's DOM parser over one traceEvents element at a time (Note [Streaming the trace]). The
// DOM API picks the fastest SIMD kernel the CPU has at run time; the On Demand API would be
// fixed at compile time to what the build flags allow, the portable fallback in a generic build.
// One pass reads the fields the converter uses; inside "args" only the few it needs.
#include "raw_event.hpp"

#include <simdjson.h>

#include <cmath>
#include <string>

namespace memcomm::prof::kineto {

namespace dom = simdjson::dom;

struct EventParser::Impl {
  dom::parser parser;
  std::string scratch;  // a padded copy when the input has too few bytes after the element
};

EventParser::EventParser() : impl_(std::make_unique<Impl>()) {}
EventParser::~EventParser() = default;

namespace {

bool read_int(dom::element v, int64_t& out) {
  int64_t x = 0;
  if (v.get_int64().get(x) == simdjson::SUCCESS) {
    out = x;
    return true;
  }
  double d = 0;  // 12.0 and similar: integral values written as floats
  if (v.get_double().get(d) == simdjson::SUCCESS && std::isfinite(d) && std::fabs(d) < 9.0e18) {
    out = int64_t(d);
    return true;
  }
  return false;
}

void read_number(dom::element v, Number& out) {
  out.present = true;
  out.is_int = v.get_int64().get(out.i) == simdjson::SUCCESS;
  if (!out.is_int && v.get_double().get(out.d) != simdjson::SUCCESS) out.d = std::nan("");
}

void read_track(dom::element v, TrackId& out) {
  if (v.is_string()) out.is_string = v.get_string().get(out.text) == simdjson::SUCCESS;
  else read_int(v, out.number);
}

void read_string(dom::element v, std::string_view& out) {
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) out = s;
}

void read_counters(dom::object args, RawEvent& e) {
  for (dom::key_value_pair kv : args) {
    double d = 0;
    if (e.counters < RawEvent::kMaxCounters && kv.value.get_double().get(d) == simdjson::SUCCESS && std::isfinite(d)) {
      e.counter_key[e.counters] = kv.key;
      e.counter_value[e.counters++] = d;
    }
  }
}

void read_args(dom::object args, RawEvent& e) {
  for (dom::key_value_pair kv : args) {
    const std::string_view k = kv.key;
    const dom::element a = kv.value;
    if (k == "correlation") read_int(a, e.correlation);
    else if (k == "device") read_int(a, e.device);
    else if (k == "stream") read_int(a, e.stream);
    else if (k == "bytes") read_int(a, e.bytes);
    else if (k == "Device Type") read_int(a, e.device_type);
    else if (k == "Device Id") read_int(a, e.device_id);
    else if (k == "Addr") { uint64_t x = 0; if (a.get_uint64().get(x) == simdjson::SUCCESS) e.addr = x; }
    else if (k == "Bytes") read_int(a, e.mem_bytes);
    else if (k == "Total Allocated") read_int(a, e.total_allocated);
    else if (k == "Total Reserved") read_int(a, e.total_reserved);
    else if (k == "name") read_string(a, e.arg_name);
    else if (k == "Collective name") read_string(a, e.collective);
    else if (k == "In msg nelems") read_int(a, e.in_nelems);
    else if (k == "Out msg nelems") read_int(a, e.out_nelems);
    else if (k == "Group size") read_int(a, e.group_size);
    else if (k == "dtype") read_string(a, e.dtype);
    else if (k == "Process Group Name") read_string(a, e.pg_name);
    else if (k == "Process Group Ranks") read_string(a, e.pg_ranks);
  }
}

void read_event(dom::object obj, RawEvent& e) {
  dom::object args;
  bool have_args = false;
  for (dom::key_value_pair kv : obj) {
    const std::string_view k = kv.key;
    if (k == "ph") read_string(kv.value, e.ph);
    else if (k == "cat") read_string(kv.value, e.cat);
    else if (k == "name") read_string(kv.value, e.name);
    else if (k == "ts") read_number(kv.value, e.ts);
    else if (k == "dur") read_number(kv.value, e.dur);
    else if (k == "pid") read_track(kv.value, e.pid);
    else if (k == "tid") read_track(kv.value, e.tid);
    else if (k == "args") have_args = kv.value.get_object().get(args) == simdjson::SUCCESS;
  }
  if (!have_args) return;
  if (e.ph == "C") read_counters(args, e);  // counters need ph, which may come after args
  else read_args(args, e);
}

}  // namespace

bool EventParser::parse(std::string_view raw, size_t readable_after, RawEvent& out, std::string& error) {
  out = RawEvent{};
  const char* data = raw.data();
  if (readable_after < simdjson::SIMDJSON_PADDING) {
    impl_->scratch.assign(raw);
    impl_->scratch.append(simdjson::SIMDJSON_PADDING, ' ');
    data = impl_->scratch.data();
  }
  dom::element doc;
  dom::object obj;
  auto err = impl_->parser.parse(data, raw.size(), false).get(doc);
  if (!err) err = doc.get_object().get(obj);
  if (err) {
    error = simdjson::error_message(err);
    return false;
  }
  read_event(obj, out);
  return true;
}

bool us_to_ns(const Number& us, int64_t& ns, bool& sub_us) {
  constexpr int64_t kLimit = int64_t(1) << 62;
  sub_us = false;
  if (!us.present) return false;
  if (us.is_int) {
    if (us.i > kLimit / 1000 || us.i < -kLimit / 1000) return false;
    ns = us.i * 1000;
    return true;
  }
  if (!std::isfinite(us.d) || std::fabs(us.d) >= double(kLimit / 1000)) return false;
  const double whole = std::floor(us.d);
  const double frac = us.d - whole;  // exact: both are doubles of the same binade or smaller
  const int64_t frac_ns = std::llround(frac * 1000.0);
  sub_us = frac_ns != 0 && frac_ns != 1000;
  ns = int64_t(whole) * 1000 + frac_ns;
  return true;
}

}  // namespace memcomm::prof::kineto
