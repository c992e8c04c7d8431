// The data-only pickle virtual machine. See Note [Data-only pickles] and Note [Compact values]
// in pickle.hpp. Each opcode handler checks the bytes it needs and the stack it pops, and reports
// the opcode's own byte offset on failure, so truncated or corrupt input never reads out of bounds.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include "memcomm/snapshot/pickle.hpp"

namespace memcomm::snapshot::pickle {
namespace {

// Index of the first byte of `p` that does not belong to the UTF-8 Python's unpickler reads (RFC 3629:
// no overlong forms, nothing past U+10FFFF; but surrogates, which pickle writes and reads with
// "surrogatepass": a file name that is not UTF-8 reaches Python as lone surrogates, so a frame's
// filename may hold them), or n. ASCII runs, nearly every snapshot string, cost one comparison a byte.
std::uint64_t first_invalid_utf8(const std::uint8_t* p, std::uint64_t n) {
  std::uint64_t i = 0;
  while (i < n) {
    const std::uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    const int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (len == 0 || c > 0xF4 || n - i < std::uint64_t(len)) return i;
    const std::uint8_t c1 = p[i + 1];
    const bool second_ok = c == 0xE0 ? (c1 >= 0xA0 && c1 <= 0xBF) : c == 0xF0 ? (c1 >= 0x90 && c1 <= 0xBF)
                         : c == 0xF4 ? (c1 >= 0x80 && c1 <= 0x8F)
                                     : (c1 & 0xC0) == 0x80;
    if (!second_ok) return i;
    for (int k = 2; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return n;
}

// Opcode names for messages; empty for bytes that are no opcode at all.
const char* opcode_name(std::uint8_t op) {
  switch (op) {
    case '(': return "MARK";          case '.': return "STOP";          case '0': return "POP";
    case '1': return "POP_MARK";      case '2': return "DUP";           case 'F': return "FLOAT";
    case 'I': return "INT";           case 'J': return "BININT";        case 'K': return "BININT1";
    case 'L': return "LONG";          case 'M': return "BININT2";       case 'N': return "NONE";
    case 'P': return "PERSID";        case 'Q': return "BINPERSID";     case 'R': return "REDUCE";
    case 'S': return "STRING";        case 'T': return "BINSTRING";     case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";       case 'X': return "BINUNICODE";    case 'a': return "APPEND";
    case 'b': return "BUILD";         case 'c': return "GLOBAL";        case 'd': return "DICT";
    case '}': return "EMPTY_DICT";    case 'e': return "APPENDS";       case 'g': return "GET";
    case 'h': return "BINGET";        case 'i': return "INST";          case 'j': return "LONG_BINGET";
    case 'l': return "LIST";          case ']': return "EMPTY_LIST";    case 'o': return "OBJ";
    case 'p': return "PUT";           case 'q': return "BINPUT";        case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";       case 't': return "TUPLE";         case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS";      case 'G': return "BINFLOAT";      case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x80: return "PROTO";        case 0x81: return "NEWOBJ";       case 0x82: return "EXT1";
    case 0x83: return "EXT2";         case 0x84: return "EXT4";         case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";       case 0x87: return "TUPLE3";       case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";     case 0x8a: return "LONG1";        case 0x8b: return "LONG4";
    case 0x8c: return "SHORT_BINUNICODE"; case 0x8d: return "BINUNICODE8"; case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";    case 0x90: return "ADDITEMS";     case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";    case 0x93: return "STACK_GLOBAL"; case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";        case 0x96: return "BYTEARRAY8";   case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return "";
  }
}

}  // namespace

// Friend of Document: builds one in place while executing the opcodes.
class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size, std::string source, Document& doc, const LoadOptions& opts)
      : p_(data), size_(size), doc_(doc), opts_(opts) {
    doc_.source_ = std::move(source);
    // Rough pre-sizing: real snapshots hold about one container per 60 bytes.
    doc_.containers_.reserve(size / 64 + 16);
  }

  void run();

 private:
  // Error paths are cold and out of line so the opcode loop stays small.
  [[noreturn, gnu::cold, gnu::noinline]] void fail(const std::string& what) const { throw ReadError(doc_.source_, op_pos_, what); }
  [[noreturn, gnu::cold, gnu::noinline]] void fail_op(const std::string& what) const {
    fail(fmt::format("{} opcode: {}", opcode_name(op_), what));
  }

  [[noreturn, gnu::cold, gnu::noinline]] void fail_truncated(std::uint64_t n) const {
    fail_op(fmt::format("truncated input: needs {} more bytes, only {} left", n, size_ - pos_));
  }
  // A str opcode's n bytes, which pickle writes as UTF-8 (surrogates passed) and Python's unpickler
  // refuses otherwise.
  const std::uint8_t* need_utf8(std::uint64_t n) {
    const std::uint8_t* at = need(n);
    if (const std::uint64_t bad = first_invalid_utf8(at, n); bad < n)
      fail_op(fmt::format("the string is not UTF-8 (its byte {} is 0x{:02X}): a corrupt file", bad, at[bad]));
    return at;
  }
  const std::uint8_t* need(std::uint64_t n) {
    if (__builtin_expect(n > size_ - pos_, 0)) fail_truncated(n);
    const std::uint8_t* at = p_ + pos_;
    pos_ += static_cast<std::size_t>(n);
    return at;
  }
  std::uint64_t read_le(int n) {
    const std::uint8_t* b = need(static_cast<std::uint64_t>(n));
    std::uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = (v << 8) | b[k];
    return v;
  }
  // A protocol-0 argument: bytes up to (not including) the next newline.
  std::string_view read_line() {
    const void* nl = std::memchr(p_ + pos_, '\n', size_ - pos_);
    if (!nl) fail_op("truncated input: argument line has no terminating newline");
    auto n = static_cast<std::size_t>(static_cast<const std::uint8_t*>(nl) - (p_ + pos_));
    std::string_view line(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n + 1;
    return line;
  }

  void push(const Value& v) {
    if (__builtin_expect(stack_.size() >= opts_.max_stack_depth, 0)) fail_op("stack grows past the reader's limit");
    stack_.push_back(v);
  }
  Value pop() {
    if (__builtin_expect(stack_.size() <= floor(), 0)) fail_op("stack underflow (nothing to pop above the current mark)");
    Value v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value& top() {
    if (__builtin_expect(stack_.size() <= floor(), 0)) fail_op("stack underflow (empty stack above the current mark)");
    return stack_.back();
  }
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  // Pops the topmost mark and returns the stack index where the marked items start.
  std::size_t pop_mark() {
    if (marks_.empty()) fail_op("no MARK to pop to");
    std::size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }

  Value new_text(Kind kind, const std::uint8_t* bytes, std::size_t n) {
    if (doc_.chars_.size() + n > std::numeric_limits<std::uint32_t>::max()) fail_op("text arena exceeds 4 GiB");
    Value v;
    v.kind = kind;
    v.ref = static_cast<std::uint32_t>(doc_.texts_.size());
    doc_.texts_.emplace_back(static_cast<std::uint32_t>(doc_.chars_.size()), static_cast<std::uint32_t>(n));
    doc_.chars_.append(reinterpret_cast<const char*>(bytes), n);
    return v;
  }
  Value new_container(Kind kind) {
    Value v;
    v.kind = kind;
    v.ref = static_cast<std::uint32_t>(doc_.containers_.size());
    doc_.containers_.push_back(Container{kind, {}});
    return v;
  }
  Value new_container(Kind kind, std::size_t from) {  // takes stack_[from..] as items
    Value v = new_container(kind);
    auto& items = doc_.containers_[v.ref].items;
    items.assign(stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
    stack_.resize(from);
    return v;
  }
  Container& mutable_container(const Value& v, Kind want, const char* role) {
    if (v.kind != want) fail_op(fmt::format("{} is a {}, not a {}", role, kind_name(v.kind), kind_name(want)));
    return doc_.containers_[v.ref];
  }
  static Value integer(std::int64_t i) {
    Value v;
    v.kind = Kind::integer;
    v.i = i;
    return v;
  }
  Value long_bytes(std::uint64_t n);
  Value text_int(std::string_view line, bool is_long);
  Value text_float(std::string_view line);
  // Opcode handlers that run() delegates to (each covers one opcode or one family of them).
  void next_opcode(std::size_t& next_progress);
  void check_proto_or_frame();
  std::uint64_t read_signed_count4();
  Value binfloat();
  void set_item();
  // Hot (SETITEMS, APPENDS): inlined into run(), with the dict check decided at compile time.
  template <Kind kKind>
  [[gnu::always_inline]] void extend_below_mark(const char* role, const char* missing);
  std::uint64_t text_memo_index();
  [[noreturn]] void refuse();

  // Note [Sparse memo]: real pickles number memo slots 0, 1, 2... and every slot costs at least one
  // input byte, so slot k never exceeds the bytes read so far. Such slots live in a vector (memory
  // bounded by 17x the input); any other index (a hostile LONG_BINPUT 4000000000) goes in a map.
  void memo_put(std::uint64_t index, const Value& v) {
    if (index >= opts_.max_memo_index) fail_op(fmt::format("memo index {} exceeds the reader's limit", index));
    if (index <= pos_) {
      if (index >= memo_.size()) {
        memo_.resize(static_cast<std::size_t>(index) + 1);
        memo_set_.resize(static_cast<std::size_t>(index) + 1, 0);
      }
      if (!memo_set_[index]) ++memo_count_;
      memo_[index] = v;
      memo_set_[index] = 1;
      return;
    }
    if (sparse_memo_.emplace(index, v).second) ++memo_count_;
    else sparse_memo_[index] = v;
  }
  Value memo_get(std::uint64_t index) {
    if (__builtin_expect(index < memo_.size() && memo_set_[index], 1)) return memo_[index];
    auto it = sparse_memo_.find(index);
    if (it == sparse_memo_.end()) fail_op(fmt::format("memo index {} was never stored", index));
    return it->second;
  }

  const std::uint8_t* p_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::size_t op_pos_ = 0;  // offset of the opcode being executed
  std::uint8_t op_ = 0;
  Document& doc_;
  const LoadOptions& opts_;
  std::vector<Value> stack_;
  std::vector<std::size_t> marks_;
  std::vector<Value> memo_;
  std::vector<std::uint8_t> memo_set_;
  std::unordered_map<std::uint64_t, Value> sparse_memo_;  // see Note [Sparse memo]
  std::uint64_t memo_count_ = 0;
};

Value Reader::long_bytes(std::uint64_t n) {
  const std::uint8_t* b = need(n);
  if (n == 0) return integer(0);
  // Strip redundant sign-extension bytes so e.g. 9-byte encodings of values < 2^63 still fit.
  const bool negative = (b[n - 1] & 0x80) != 0;
  std::uint64_t len = n;
  const std::uint8_t pad = negative ? 0xff : 0x00;
  while (len > 1 && b[len - 1] == pad && ((b[len - 2] & 0x80) != 0) == negative) --len;
  if (len > 8) return new_text(Kind::big_int, b, static_cast<std::size_t>(n));
  std::uint64_t u = 0;
  for (std::uint64_t k = len; k-- > 0;) u = (u << 8) | b[k];
  if (negative && len < 8) u |= ~std::uint64_t{0} << (8 * len);
  return integer(static_cast<std::int64_t>(u));
}

Value Reader::text_int(std::string_view line, bool is_long) {
  if (is_long && !line.empty() && line.back() == 'L') line.remove_suffix(1);
  if (!is_long && (line == "00" || line == "01")) {  // protocol 0 spells False/True this way
    Value v;
    v.kind = Kind::boolean;
    v.i = line == "01";
    return v;
  }
  std::string s(line);
  if (s.empty() || s.size() > 40) fail_op("malformed integer literal");
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(s.c_str(), &end, 10);
  if (end != s.c_str() + s.size()) fail_op(fmt::format("malformed integer literal '{}'", s));
  if (errno == ERANGE) fail_op(fmt::format("integer literal '{}' does not fit in 64 bits", s));
  return integer(x);
}

Value Reader::text_float(std::string_view line) {
  std::string s(line);
  if (s.empty() || s.size() > 64) fail_op("malformed float literal");
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) fail_op(fmt::format("malformed float literal '{}'", s));
  Value v;
  v.kind = Kind::floating;
  v.f = d;
  return v;
}

// Reads the next opcode into op_ (its offset into op_pos_), reporting progress every MiB.
void Reader::next_opcode(std::size_t& next_progress) {
  if (pos_ >= size_) {
    op_pos_ = pos_;
    throw ReadError(doc_.source_, pos_, "truncated input: end of data before the STOP opcode");
  }
  if (opts_.progress && pos_ >= next_progress) {
    opts_.progress(pos_, size_, opts_.progress_user);
    next_progress = pos_ + (1u << 20);
  }
  op_pos_ = pos_;
  op_ = p_[pos_++];
}

// PROTO: a version we read. FRAME: framing is only a read-ahead hint; check it is plausible.
void Reader::check_proto_or_frame() {
  if (op_ == 0x80) {
    std::uint64_t proto = read_le(1);
    if (proto > 5) fail_op(fmt::format("unsupported pickle protocol {}", proto));
    return;
  }
  std::uint64_t n = read_le(8);
  if (n > size_ - pos_) fail_op(fmt::format("frame of {} bytes runs past the end of the input ({} left)", n, size_ - pos_));
}

// The signed 4-byte length of LONG4 and BINSTRING.
std::uint64_t Reader::read_signed_count4() {
  auto n = static_cast<std::int32_t>(static_cast<std::uint32_t>(read_le(4)));
  if (n < 0) fail_op("negative byte count");
  return static_cast<std::uint64_t>(n);
}

Value Reader::binfloat() {
  std::uint64_t bits = 0;
  const std::uint8_t* b = need(8);
  for (int k = 0; k < 8; ++k) bits = (bits << 8) | b[k];  // big-endian IEEE 754
  Value v;
  v.kind = Kind::floating;
  std::memcpy(&v.f, &bits, sizeof bits);
  return v;
}

// Python refuses a list or a dict as a dict key (unhashable): one in a pickle is a corrupt file, and
// reading past it would hand a snapshot's fields to the wrong keys. (A set may be a frozenset.)
inline bool unhashable(const Value& key) { return key.kind == Kind::list || key.kind == Kind::dict; }

void Reader::set_item() {
  Value v = pop();
  Value k = pop();
  if (unhashable(k)) fail_op(fmt::format("unhashable dict key (a {})", kind_name(k.kind)));
  Container& c = mutable_container(top(), Kind::dict, "SETITEM target");
  c.items.push_back(k);
  c.items.push_back(v);
}

// APPENDS, ADDITEMS, SETITEMS: the container sits just below the mark; the items are above it.
template <Kind kKind>
inline void Reader::extend_below_mark(const char* role, const char* missing) {
  std::size_t m = pop_mark();
  if (m <= floor() || m > stack_.size()) fail_op(missing);
  if constexpr (kKind == Kind::dict) {
    if ((stack_.size() - m) % 2) fail_op("odd number of items (a key without a value)");
    for (std::size_t k = m; k < stack_.size(); k += 2)
      if (unhashable(stack_[k])) fail_op(fmt::format("unhashable dict key (a {})", kind_name(stack_[k].kind)));
  }
  Container& c = mutable_container(stack_[m - 1], kKind, role);
  c.items.insert(c.items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
  stack_.resize(m);
}

// GET and PUT: a decimal memo index on its own line.
std::uint64_t Reader::text_memo_index() {
  std::string_view line = read_line();
  char* end = nullptr;
  std::string s(line.substr(0, 24));
  unsigned long long idx = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || line.size() > 24) fail_op("malformed memo index");
  return idx;
}

void Reader::refuse() {
  switch (op_) {
    // These would import or call Python code (Note [Data-only pickles]).
    case 'c': case 0x93: case 'R': case 'b': case 'i': case 'o': case 0x81: case 0x92:
    case 'P': case 'Q': case 0x82: case 0x83: case 0x84: case 0x97: case 0x98:
      fail(fmt::format("{} opcode refused: this reader builds plain data only and never imports or calls "
                       "anything (is this really a PyTorch memory snapshot?)", opcode_name(op_)));
    case 'S': case 'V':
      fail(fmt::format("{} opcode (a text string of pickle protocol 0) is not supported: save the snapshot with "
                       "protocol 2 or later (torch.cuda.memory._dump_snapshot does; pickle.dump(obj, f, protocol=4))",
                       opcode_name(op_)));
    default:
      fail(fmt::format("invalid opcode byte 0x{:02x}", op_));
  }
}

void Reader::run() {
  std::size_t next_progress = 1u << 20;
  while (true) {
    next_opcode(next_progress);
    switch (op_) {
      case 0x80:  // PROTO
      case 0x95: check_proto_or_frame(); break;  // FRAME
      case '.': doc_.root_ = pop(); return;  // STOP
      case '(': marks_.push_back(stack_.size()); break;
      case '0': pop(); break;
      case '1': stack_.resize(pop_mark()); break;
      case '2': { Value v = top(); push(v); break; }

      case 'N': push(Value{}); break;
      case 0x88:
      case 0x89: {
        Value v;
        v.kind = Kind::boolean;
        v.i = op_ == 0x88;
        push(v);
        break;
      }
      case 'J': push(integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(read_le(4))))); break;
      case 'K': push(integer(static_cast<std::int64_t>(read_le(1)))); break;
      case 'M': push(integer(static_cast<std::int64_t>(read_le(2)))); break;
      case 0x8a: push(long_bytes(read_le(1))); break;
      case 0x8b: push(long_bytes(read_signed_count4())); break;
      case 'I': push(text_int(read_line(), false)); break;
      case 'L': push(text_int(read_line(), true)); break;
      case 'F': push(text_float(read_line())); break;
      case 'G': push(binfloat()); break;

      case 0x8c: { std::uint64_t n = read_le(1); push(new_text(Kind::string, need_utf8(n), n)); break; }
      case 'X':  { std::uint64_t n = read_le(4); push(new_text(Kind::string, need_utf8(n), n)); break; }
      case 0x8d: { std::uint64_t n = read_le(8); push(new_text(Kind::string, need_utf8(n), n)); break; }
      case 'C':
      case 'U':  { std::uint64_t n = read_le(1); push(new_text(Kind::bytes, need(n), n)); break; }
      case 'B':  { std::uint64_t n = read_le(4); push(new_text(Kind::bytes, need(n), n)); break; }
      case 'T':  { std::uint64_t n = read_signed_count4(); push(new_text(Kind::bytes, need(n), n)); break; }
      case 0x8e:
      case 0x96: { std::uint64_t n = read_le(8); push(new_text(Kind::bytes, need(n), n)); break; }

      case '}': push(new_container(Kind::dict)); break;
      case ']': push(new_container(Kind::list)); break;
      case ')': push(new_container(Kind::tuple)); break;
      case 0x8f: push(new_container(Kind::set)); break;
      case 'd': {
        std::size_t m = pop_mark();
        if ((stack_.size() - m) % 2) fail_op("odd number of items for a dict");
        push(new_container(Kind::dict, m));
        break;
      }
      case 'l': { std::size_t m = pop_mark(); push(new_container(Kind::list, m)); break; }
      case 't': { std::size_t m = pop_mark(); push(new_container(Kind::tuple, m)); break; }
      case 0x91: { std::size_t m = pop_mark(); push(new_container(Kind::set, m)); break; }
      case 0x85:
      case 0x86:
      case 0x87: {
        std::size_t n = op_ - 0x84u;
        if (stack_.size() < floor() + n) fail_op("stack underflow");
        push(new_container(Kind::tuple, stack_.size() - n));
        break;
      }
      case 'a': {
        Value item = pop();
        mutable_container(top(), Kind::list, "APPEND target").items.push_back(item);
        break;
      }
      case 'e': extend_below_mark<Kind::list>("APPENDS target", "no list below the mark"); break;
      case 0x90: extend_below_mark<Kind::set>("ADDITEMS target", "no set below the mark"); break;
      case 's': set_item(); break;
      case 'u': extend_below_mark<Kind::dict>("SETITEMS target", "no dict below the mark"); break;

      case 'h': push(memo_get(read_le(1))); break;
      case 'j': push(memo_get(read_le(4))); break;
      case 'g': push(memo_get(text_memo_index())); break;
      case 'q': memo_put(read_le(1), top()); break;
      case 'r': memo_put(read_le(4), top()); break;
      case 'p': memo_put(text_memo_index(), top()); break;
      case 0x94: memo_put(memo_count_, top()); break;

      default: refuse();  // code-running opcodes (Note [Data-only pickles]) and invalid bytes
    }
  }
}

Document load(const void* data, std::size_t size, std::string source, const LoadOptions& options) {
  Document doc;
  Reader reader(static_cast<const std::uint8_t*>(data), size, std::move(source), doc, options);
  reader.run();
  return doc;
}

}  // namespace memcomm::snapshot::pickle
