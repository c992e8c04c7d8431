// simdjson's On Demand API over one traceEvents element at a time (Note [Streaming the trace],
// Note [One simdjson translation unit]): one pass over the object's fields and, inside "args", over
// the few arguments the converter uses; every other value is skipped without being decoded.
#include "raw_event.hpp"

#include <simdjson.h>

#include <cmath>
#include <string>

#include "json_splitter.hpp"

namespace memcomm::prof::kineto {

namespace od = simdjson::ondemand;

struct EventParser::Impl {
  od::parser parser;
  std::string scratch;  // a padded copy when the input has too few bytes after the element
};

EventParser::EventParser() : impl_(std::make_unique<Impl>()) {}
EventParser::~EventParser() = default;

namespace {

// An integer; a double is cut to one (1e3, 2.5 -> 2), unless `whole`: then only a whole double is
// (a rank of 1.7 is no rank, 2.0 is 2).
bool read_int(od::value v, int64_t& out, bool whole = false) {
  od::number n;
  if (v.get_number().get(n) != simdjson::SUCCESS) return false;
  if (n.is_int64()) {
    out = n.get_int64();
    return true;
  }
  if (n.is_uint64()) return false;
  const double d = n.get_double();
  if (!std::isfinite(d) || std::fabs(d) >= 9.0e18 || (whole && std::trunc(d) != d)) return false;
  out = int64_t(d);
  return true;
}

void read_number(od::value v, Number& out) {
  out.present = true;
  std::string_view s = v.raw_json_token();
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) s.remove_suffix(1);
  out.text = s;
}

void read_track(od::value v, TrackId& out) {
  od::json_type t;
  if (v.type().get(t) != simdjson::SUCCESS) return;
  if (t == od::json_type::string) out.is_string = v.get_string().get(out.text) == simdjson::SUCCESS;
  else read_int(v, out.number);
}

void read_string(od::value v, std::string_view& out) {
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) out = s;
}

void read_counter(std::string_view key, od::value v, RawEvent& e) {
  double d = 0;
  if (v.get_double().get(d) == simdjson::SUCCESS && std::isfinite(d)) e.counters.emplace_back(key, d);
}

// The elements one "Input Dims" entry names: a shape ([2, 3]: 6), a list of shapes (a TensorList:
// their sum) or [] (no tensor: 0). False for anything else, or past 2^48 elements (no real tensor).
bool entry_elements(od::value v, int64_t& out, bool inner = false) {
  od::array arr;
  if (v.get_array().get(arr) != simdjson::SUCCESS) return false;
  constexpr int64_t kMaxElements = int64_t{1} << 48;
  int64_t product = 1, sum = 0;
  bool dims = false, shapes = false;
  for (auto item : arr) {
    od::value x;
    od::json_type t;
    if (item.get(x) != simdjson::SUCCESS || x.type().get(t) != simdjson::SUCCESS) return false;
    int64_t n = 0;
    if (t == od::json_type::number) {
      if (!read_int(x, n, true) || n < 0 || (n > 0 && product > kMaxElements / n)) return false;
      product *= n;
      dims = true;
    } else if (t == od::json_type::array && !inner) {
      if (!entry_elements(x, n, true) || (sum += n) > kMaxElements) return false;
      shapes = true;
    } else {
      return false;
    }
  }
  if (dims && shapes) return false;
  out = dims ? product : sum;
  return true;
}

void read_input_elements(od::value v, RawEvent& e) {
  od::array arr;
  if (v.get_array().get(arr) != simdjson::SUCCESS) return;
  int64_t total = 0;
  for (auto item : arr) {
    od::value x;
    int64_t n = 0;
    if (item.get(x) != simdjson::SUCCESS || !entry_elements(x, n) || (total += n) > (int64_t{1} << 48)) return;
  }
  e.input_elements = total;
}

// The first element of an array of strings; the others are read past.
void read_first_string(od::value v, std::string_view& out) {
  od::array arr;
  if (v.get_array().get(arr) != simdjson::SUCCESS) return;
  bool first = true;
  for (auto item : arr) {
    od::value x;
    if (item.get(x) == simdjson::SUCCESS && first) read_string(x, out);
    first = false;
  }
}

// The spans whose shapes are a collective's size. Where "args" comes before "name" (a trace re-saved
// with sorted keys), every event's are read.
bool sized_by_shapes(const RawEvent& e) { return e.name.empty() || gloo_op(e.name) || nccl_annotation(e.name); }

// Dispatches on the key's length first: events carry many args the converter never reads
// ("Input Dims" of operators, "Ev Idx", ...), and most of them then cost one comparison or none.
void read_arg(std::string_view k, od::value a, RawEvent& e) {
  switch (k.size()) {
    case 4:
      if (k == "name") read_string(a, e.arg_name);
      else if (k == "Addr") {
        e.has_addr = a.get_uint64().get(e.addr) == simdjson::SUCCESS;
        if (!e.has_addr) e.addr = 0;
      }
      break;
    case 5:
      if (k == "bytes") read_int(a, e.bytes);
      else if (k == "Bytes") read_int(a, e.mem_bytes);
      else if (k == "dtype") read_string(a, e.dtype);
      break;
    case 6:
      if (k == "device") read_int(a, e.device);
      else if (k == "stream") read_int(a, e.stream);
      break;
    case 9:
      if (k == "Device Id") read_int(a, e.device_id);
      break;
    case 10:
      if (k == "Group size") read_int(a, e.group_size);
      else if (k == "Input Dims" && sized_by_shapes(e)) read_input_elements(a, e);  // only where it is read
      else if (k == "Input type" && sized_by_shapes(e)) read_first_string(a, e.input_type);
      break;
    case 11:
      if (k == "correlation") read_int(a, e.correlation);
      else if (k == "Device Type") read_int(a, e.device_type);
      break;
    case 13:
      if (k == "In msg nelems") read_int(a, e.in_nelems);
      break;
    case 14:
      if (k == "Out msg nelems") read_int(a, e.out_nelems);
      else if (k == "Total Reserved") read_int(a, e.total_reserved);
      break;
    case 15:
      if (k == "Total Allocated") read_int(a, e.total_allocated);
      else if (k == "Collective name") read_string(a, e.collective);
      break;
    case 18:
      if (k == "Process Group Name") read_string(a, e.pg_name);
      break;
    case 19:
      if (k == "Process Group Ranks") read_string(a, e.pg_ranks);
      break;
    default:
      break;
  }
}

simdjson::error_code read_args(od::value v, RawEvent& e) {
  od::object args;
  if (auto err = v.get_object().get(args)) return err;
  // Counters need ph, which Kineto writes before args; a counter whose ph comes later keeps none.
  const bool counter = e.ph == "C";
  for (auto field : args) {
    std::string_view k;
    if (auto err = field.unescaped_key().get(k)) return err;
    if (counter) read_counter(k, field.value(), e);
    else read_arg(k, field.value(), e);
  }
  return simdjson::SUCCESS;
}

simdjson::error_code read_event(od::object obj, RawEvent& e) {
  for (auto field : obj) {
    std::string_view k;
    if (auto err = field.unescaped_key().get(k)) return err;
    od::value v = field.value();
    switch (k.size()) {
      case 2:
        if (k == "ph") read_string(v, e.ph);
        else if (k == "ts") read_number(v, e.ts);
        break;
      case 3:
        if (k == "cat") read_string(v, e.cat);
        else if (k == "dur") read_number(v, e.dur);
        else if (k == "pid") read_track(v, e.pid);
        else if (k == "tid") read_track(v, e.tid);
        break;
      case 4:
        if (k == "name") {
          read_string(v, e.name);
        } else if (k == "args") {
          if (auto err = read_args(v, e)) return err;
        }
        break;
      default:
        break;
    }
  }
  return simdjson::SUCCESS;
}

// What the splitter and the parallel parser leave after each element lets it be parsed in place.
static_assert(kParsePadding >= simdjson::SIMDJSON_PADDING, "kParsePadding must cover simdjson's read-ahead");

simdjson::padded_string_view padded(std::string_view raw, size_t readable_after, std::string& scratch) {
  if (readable_after >= simdjson::SIMDJSON_PADDING)
    return simdjson::padded_string_view(raw.data(), raw.size(), raw.size() + readable_after);
  scratch.assign(raw);
  scratch.append(simdjson::SIMDJSON_PADDING, ' ');
  return simdjson::padded_string_view(scratch.data(), raw.size(), scratch.size());
}

void read_devices(od::value v, TopLevel& top) {
  od::array devices;
  if (v.get_array().get(devices)) return;
  for (auto d : devices) {
    od::object o;
    if (d.get_object().get(o)) continue;
    TopLevel::Device dev{-1, "", 0};
    for (auto field : o) {
      std::string_view k, name;
      if (field.unescaped_key().get(k)) break;
      if (k == "id") read_int(field.value(), dev.id);
      else if (k == "name" && field.value().get_string().get(name) == simdjson::SUCCESS) dev.name = std::string(name);
      else if (k == "totalGlobalMem" && field.value().get_uint64().get(dev.total_memory)) dev.total_memory = 0;
    }
    if (dev.id >= 0) top.devices.push_back(std::move(dev));
  }
}

}  // namespace

bool EventParser::parse(std::string_view raw, size_t readable_after, RawEvent& out, std::string& error) {
  out.reset();
  od::document doc;
  auto err = impl_->parser.iterate(padded(raw, readable_after, impl_->scratch)).get(doc);
  od::object obj;
  if (!err) err = doc.get_object().get(obj);
  if (!err) err = read_event(obj, out);
  if (err) {  // a value of another type is valid JSON of another shape; anything else is no JSON
    error = std::string(err == simdjson::INCORRECT_TYPE ? "" : kBrokenJson) + simdjson::error_message(err);
    return false;
  }
  return true;
}

void EventParser::own_strings(RawEvent& e, std::string& arena) {
  auto own = [&](std::string_view& v) {
    if (v.empty()) return;
    const size_t at = arena.size();
    arena.append(v);
    v = std::string_view(arena.data() + at, v.size());
  };
  for (std::string_view* v : {&e.ts.text, &e.dur.text, &e.ph, &e.cat, &e.name, &e.arg_name, &e.collective, &e.dtype, &e.pg_name, &e.pg_ranks,
                              &e.input_type, &e.pid.text, &e.tid.text})
    own(*v);
  for (auto& counter : e.counters) own(counter.first);
}

// Scalar documents are read with the document's own getters (On Demand refuses them as values).
bool EventParser::parse_member(std::string_view key, std::string_view raw, TopLevel& top) {
  od::document doc;
  if (impl_->parser.iterate(padded(raw, 0, impl_->scratch)).get(doc)) return false;
  std::string_view s;
  if (key == "distributedInfo") {
    od::object o;
    if (doc.get_object().get(o)) return false;
    for (auto field : o) {
      std::string_view k;
      if (field.unescaped_key().get(k)) return false;
      if (k == "rank") top.rank_unreadable = !read_int(field.value(), top.rank, /*whole=*/true);
      else if (k == "world_size") top.world_size_unreadable = !read_int(field.value(), top.world_size, /*whole=*/true);
    }
  } else if (key == "deviceProperties") {
    od::value v;
    if (doc.get_value().get(v)) return false;
    read_devices(v, top);
  } else if (key == "displayTimeUnit") {
    if (doc.get_string().get(s)) return false;
    top.display_time_unit = std::string(s);
  } else if (key == "baseTimeNanoseconds") {
    if (doc.get_int64().get(top.base_time_ns)) return false;
  } else if (key == "schemaVersion") {
    if (doc.get_int64().get(top.schema_version)) return false;
  } else if (key == "otherData") {
    od::object o;
    if (doc.get_object().get(o)) return false;
    for (auto field : o) {
      std::string_view k;
      if (field.unescaped_key().get(k)) return false;
      if (k == "producer" && !field.value().get_string().get(s)) top.producer = std::string(s);
    }
  } else if (key == "host_name" || key == "hostname") {
    if (doc.get_string().get(s)) return false;
    top.host = std::string(s);
  }
  return true;
}

bool us_to_ns(const Number& us, int64_t& ns, bool& sub_us) { return us.present && us_text_to_ns(us.text, ns, sub_us); }

bool us_text_to_ns(std::string_view t, int64_t& ns, bool& sub_us) {
  constexpr int64_t kLimit = int64_t(1) << 62;
  sub_us = false;
  size_t i = 0;
  const bool neg = !t.empty() && t[0] == '-';
  if (neg) ++i;
  int64_t whole = 0;
  size_t digits = 0;
  for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i, ++digits) {
    if (whole >= kLimit / 10000) return false;
    whole = whole * 10 + (t[i] - '0');
  }
  if (digits == 0) return false;
  int frac = 0, frac_digits = 0;
  bool rest = false;
  if (i < t.size() && t[i] == '.')
    for (++i; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
      if (frac_digits < 4) frac = frac * 10 + (t[i] - '0'), ++frac_digits;
      else rest |= t[i] != '0';
    }
  if (i < t.size()) {  // an exponent
    const std::string copy(t);
    char* end = nullptr;
    const double us = std::strtod(copy.c_str(), &end);
    if (end != copy.c_str() + copy.size() || !std::isfinite(us) || std::fabs(us) >= double(kLimit / 1000)) return false;
    ns = std::llround(us * 1000.0);
    sub_us = ns % 1000 != 0;
    return true;
  }
  for (; frac_digits < 4; ++frac_digits) frac *= 10;
  sub_us = frac != 0 || rest;
  const int64_t v = whole * 1000 + (frac + 5) / 10;
  ns = neg ? -v : v;
  return true;
}

}  // namespace memcomm::prof::kineto
