// Accessors over a decoded pickle document: typed lookups that fail with the file name instead of
// crashing when a snapshot does not have the shape the model expects.
#include <fmt/format.h>

#include "memcomm/snapshot/pickle.hpp"

namespace memcomm::snapshot::pickle {

const char* kind_name(Kind k) noexcept {
  switch (k) {
    case Kind::none: return "None";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::big_int: return "int (wider than 64 bits)";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::bytes: return "bytes";
    case Kind::list: return "list";
    case Kind::tuple: return "tuple";
    case Kind::dict: return "dict";
    case Kind::set: return "set";
  }
  return "?";
}

std::string_view Document::text(const Value& v) const {
  if (v.kind != Kind::string && v.kind != Kind::bytes && v.kind != Kind::big_int) return {};
  const auto& [off, len] = texts_[v.ref];
  return std::string_view(chars_.data() + off, len);
}

const Container& Document::container(const Value& v) const {
  if (!v.is_container()) throw ReadError(source_, kNoOffset, fmt::format("expected a container, got {}", kind_name(v.kind)));
  return containers_[v.ref];
}

const Value* Document::find(const Value& dict, std::string_view key) const {
  if (dict.kind != Kind::dict) return nullptr;
  const auto& items = containers_[dict.ref].items;
  // Later keys win, as in Python where a repeated SETITEM overwrites.
  for (std::size_t k = items.size(); k >= 2; k -= 2) {
    const Value& kv = items[k - 2];
    if (kv.kind == Kind::string && text(kv) == key) return &items[k - 1];
  }
  return nullptr;
}

std::int64_t Document::as_int(const Value& v, std::string_view what) const {
  if (v.kind == Kind::integer || v.kind == Kind::boolean) return v.i;
  if (v.kind == Kind::big_int) throw ReadError(source_, kNoOffset, fmt::format("{}: integer does not fit in 64 bits", what));
  throw ReadError(source_, kNoOffset, fmt::format("{}: expected int, got {}", what, kind_name(v.kind)));
}

double Document::as_number(const Value& v, std::string_view what) const {
  if (v.kind == Kind::floating) return v.f;
  return static_cast<double>(as_int(v, what));
}

bool Document::as_bool(const Value& v, std::string_view what) const {
  if (v.kind == Kind::boolean || v.kind == Kind::integer) return v.i != 0;
  throw ReadError(source_, kNoOffset, fmt::format("{}: expected bool, got {}", what, kind_name(v.kind)));
}

std::string_view Document::as_string(const Value& v, std::string_view what) const {
  if (v.kind == Kind::string) return text(v);
  throw ReadError(source_, kNoOffset, fmt::format("{}: expected str, got {}", what, kind_name(v.kind)));
}

const Container& Document::as_container(const Value& v, Kind kind, std::string_view what) const {
  if (v.kind != kind) {
    throw ReadError(source_, kNoOffset, fmt::format("{}: expected {}, got {}", what, kind_name(kind), kind_name(v.kind)));
  }
  return containers_[v.ref];
}

const Container& Document::as_sequence(const Value& v, std::string_view what) const {
  if (v.kind != Kind::list && v.kind != Kind::tuple) {
    throw ReadError(source_, kNoOffset, fmt::format("{}: expected list, got {}", what, kind_name(v.kind)));
  }
  return containers_[v.ref];
}

std::string Document::repr(const Value& v, int depth) const {
  switch (v.kind) {
    case Kind::none: return "None";
    case Kind::boolean: return v.i ? "True" : "False";
    case Kind::integer: return std::to_string(v.i);
    case Kind::big_int: return "<big int>";
    case Kind::floating: return fmt::format("{}", v.f);
    case Kind::string: return fmt::format("'{}'", text(v));
    case Kind::bytes: return fmt::format("b<{} bytes>", text(v).size());
    default: break;
  }
  const auto& items = containers_[v.ref].items;
  const char* open = v.kind == Kind::list ? "[" : v.kind == Kind::tuple ? "(" : "{";
  const char* close = v.kind == Kind::list ? "]" : v.kind == Kind::tuple ? ")" : "}";
  // Depth-limited, so a list that contains itself (legal in a pickle) still prints.
  if (depth <= 0) return fmt::format("{}...{}", open, close);
  std::string out = open;
  const std::size_t limit = 8;
  const std::size_t step = v.kind == Kind::dict ? 2 : 1;
  for (std::size_t k = 0; k < items.size(); k += step) {
    if (k > 0) out += ", ";
    if (k / step >= limit) {
      out += "...";
      break;
    }
    out += repr(items[k], depth - 1);
    if (step == 2) out += ": " + repr(items[k + 1], depth - 1);
  }
  if (v.kind == Kind::tuple && items.size() == 1) out += ",";
  return out + close;
}

}  // namespace memcomm::snapshot::pickle
