// The data-only pickle reader: every supported opcode, the memo, real CPython output, hostile and
// broken input.
#include <cmath>
#include <string>

#include "memcomm/snapshot/pickle.hpp"
#include "memcomm_test.hpp"
#include "pickle_builder.hpp"

using memcomm::snapshot::ReadError;
using memcomm::test::from_hex;
using memcomm::test::PickleBuilder;
namespace pk = memcomm::snapshot::pickle;

namespace {

pk::Document load(const PickleBuilder& b) { return pk::load(b.data(), b.size(), "test.pickle"); }
pk::Document load(const std::vector<std::uint8_t>& b) { return pk::load(b.data(), b.size(), "test.pickle"); }

// Loads "[<body>]" (EMPTY_LIST MARK body APPENDS STOP).
template <class F>
pk::Document in_list(F&& body) {
  PickleBuilder b;
  b.proto(4).empty_list().mark();
  body(b);
  b.appends().stop();
  return load(b);
}

// Expects a ReadError at `offset` whose message contains `needle`.
void expect_error(const std::vector<std::uint8_t>& bytes, std::uint64_t offset, const std::string& needle) {
  try {
    pk::load(bytes.data(), bytes.size(), "bad.pickle");
    FAIL("no error for input expected to fail with '" << needle << "'");
  } catch (const ReadError& e) {
    INFO(e.what());
    CHECK(e.file() == "bad.pickle");
    CHECK(e.offset() == offset);
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
    CHECK(std::string(e.what()).find("bad.pickle") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("pickle: scalars from every integer, float, bool and None opcode", "[pickle]") {
  auto d = in_list([](PickleBuilder& b) {
    b.op('K').le(200, 1);                        // BININT1
    b.op('M').le(60000, 2);                      // BININT2
    b.op('J').le(0xfffffffeu, 4);                // BININT -2
    b.op(0x8a).raw(0);                           // LONG1 zero bytes = 0
    b.op(0x8a).raw(2).le(0xff7f, 2);             // LONG1 -129
    b.op(0x8a).raw(8).le(0x7fffffffffffffffull, 8);
    b.op(0x8b).le(3, 4).le(0x800000, 3);         // LONG4 3 bytes: -8388608
    b.op('I').text("-42\n");                     // INT (text)
    b.op('I').text("01\n");                      // INT True
    b.op('L').text("1234567890123L\n");          // LONG (text)
    b.op('F').text("2.5\n");                     // FLOAT (text)
    b.op('G').raw(0x3f).raw(0xf8).le(0, 6);      // BINFLOAT 1.5 (big-endian)
    b.op(0x88).op(0x89).op('N');                 // NEWTRUE NEWFALSE NONE
  });
  const auto& it = d.container(d.root()).items;
  REQUIRE(it.size() == 15);
  CHECK(d.as_int(it[0], "") == 200);
  CHECK(d.as_int(it[1], "") == 60000);
  CHECK(d.as_int(it[2], "") == -2);
  CHECK(d.as_int(it[3], "") == 0);
  CHECK(d.as_int(it[4], "") == -129);
  CHECK(d.as_int(it[5], "") == INT64_MAX);
  CHECK(d.as_int(it[6], "") == -8388608);
  CHECK(d.as_int(it[7], "") == -42);
  CHECK(it[8].kind == pk::Kind::boolean);
  CHECK(d.as_bool(it[8], ""));
  CHECK(d.as_int(it[9], "") == 1234567890123LL);
  CHECK(d.as_number(it[10], "") == 2.5);
  CHECK(d.as_number(it[11], "") == 1.5);
  CHECK(it[12].kind == pk::Kind::boolean);
  CHECK(it[12].i == 1);
  CHECK(it[13].i == 0);
  CHECK(it[14].is_none());
}

TEST_CASE("pickle: strings and bytes from every text opcode", "[pickle]") {
  auto d = in_list([](PickleBuilder& b) {
    b.op(0x8c).raw(2).text("hi");                 // SHORT_BINUNICODE
    b.op('X').le(3, 4).text("abc");               // BINUNICODE
    b.op(0x8d).le(1, 8).text("z");                // BINUNICODE8
    b.op('C').raw(2).raw(0).raw(0xff);            // SHORT_BINBYTES
    b.op('B').le(1, 4).raw(7);                    // BINBYTES
    b.op(0x8e).le(0, 8);                          // BINBYTES8 (empty)
    b.op(0x96).le(2, 8).text("ab");               // BYTEARRAY8
    b.op('U').raw(1).text("q");                   // SHORT_BINSTRING
    b.op('T').le(2, 4).text("rs");                // BINSTRING
  });
  const auto& it = d.container(d.root()).items;
  REQUIRE(it.size() == 9);
  CHECK(d.as_string(it[0], "") == "hi");
  CHECK(d.as_string(it[1], "") == "abc");
  CHECK(d.as_string(it[2], "") == "z");
  CHECK(it[3].kind == pk::Kind::bytes);
  CHECK(d.text(it[3]) == std::string("\0\xff", 2));
  CHECK(d.text(it[4]) == "\x07");
  CHECK(d.text(it[5]).empty());
  CHECK(d.text(it[6]) == "ab");
  CHECK(d.text(it[7]) == "q");
  CHECK(d.text(it[8]) == "rs");
  CHECK_THROWS_AS(d.as_string(it[3], "field"), ReadError);  // bytes are not str
}

TEST_CASE("pickle: containers from every container opcode", "[pickle]") {
  PickleBuilder b;
  b.proto(2).mark();                                  // DICT: {'l': LIST, 't': TUPLE, ...}
  b.str("l").mark().integer(1).integer(2).op('l');    // LIST
  b.str("t").mark().integer(1).op('t');               // TUPLE
  b.str("e").op(')');                                 // EMPTY_TUPLE
  b.str("t1").integer(1).op(0x85);                    // TUPLE1
  b.str("t2").integer(1).integer(2).op(0x86);         // TUPLE2
  b.str("t3").integer(1).integer(2).integer(3).op(0x87);
  b.str("s").op(0x8f).mark().integer(5).integer(6).op(0x90);  // EMPTY_SET + ADDITEMS
  b.str("f").mark().integer(7).op(0x91);              // FROZENSET
  b.str("a").empty_list().integer(9).op('a');         // APPEND
  b.str("d").empty_dict().str("k").integer(1).op('s');  // SETITEM
  b.op('d').stop();
  auto d = load(b);
  const auto& root = d.root();
  REQUIRE(root.kind == pk::Kind::dict);
  CHECK(d.dict_size(root) == 10);
  CHECK(d.as_sequence(*d.find(root, "l"), "").items.size() == 2);
  CHECK(d.find(root, "t")->kind == pk::Kind::tuple);
  CHECK(d.container(*d.find(root, "e")).items.empty());
  CHECK(d.container(*d.find(root, "t1")).items.size() == 1);
  CHECK(d.container(*d.find(root, "t2")).items.size() == 2);
  CHECK(d.container(*d.find(root, "t3")).items.size() == 3);
  CHECK(d.as_container(*d.find(root, "s"), pk::Kind::set, "").items.size() == 2);
  CHECK(d.as_container(*d.find(root, "f"), pk::Kind::set, "").items.size() == 1);
  CHECK(d.as_int(d.container(*d.find(root, "a")).items.at(0), "") == 9);
  CHECK(d.as_int(*d.find(*d.find(root, "d"), "k"), "") == 1);
  CHECK(d.find(root, "missing") == nullptr);
  CHECK(d.repr(*d.find(root, "t1")) == "(1,)");
}

TEST_CASE("pickle: stack opcodes POP, POP_MARK, DUP and FRAME", "[pickle]") {
  auto d = in_list([](PickleBuilder& b) {
    b.integer(1).integer(99).op('0');               // POP drops 99
    b.op(0x95).le(0, 8);                            // FRAME (hint only)
    b.mark().integer(5).integer(6).op('1');         // POP_MARK drops the marked items
    b.integer(3).op('2');                           // DUP
  });
  const auto& it = d.container(d.root()).items;
  REQUIRE(it.size() == 3);
  CHECK(it[0].i == 1);
  CHECK(it[1].i == 3);
  CHECK(it[2].i == 3);
}

TEST_CASE("pickle: memo put/get share objects, including later mutation", "[pickle]") {
  PickleBuilder b;
  b.proto(4).empty_list().memoize()       // memo 0: the outer list
      .mark()
      .empty_list().memoize()             // memo 1: inner list
      .binget(1)                          // same inner list again
      .long_binget(1)
      .op('p').text("7\n")                // PUT 7 (text) = inner list
      .op('g').text("7\n")                // GET 7
      .op('q').raw(9).op('h').raw(9)      // BINPUT 9 / BINGET 9
      .op('r').le(300, 4).op('j').le(300, 4)  // LONG_BINPUT 300 / LONG_BINGET 300
      .appends()
      .binget(1).integer(42).op('a')      // mutate the inner list through the memo
      .op('0')                            // pop it again; the root stays on the stack
      .stop();
  auto d = load(b);
  const auto& items = d.container(d.root()).items;
  REQUIRE(items.size() == 6);
  for (const auto& v : items) {
    CHECK(v.kind == pk::Kind::list);
    CHECK(v.ref == items[0].ref);  // one object, six references
  }
  CHECK(d.container(items[3]).items.size() == 1);  // the APPEND is visible through every reference
}

TEST_CASE("pickle: CPython output for protocols 2, 4 and 5 decodes to the same data", "[pickle]") {
  // Generated with CPython 3.11: pickle.dumps(obj, protocol=p) where obj holds ints of every width
  // (2**64 and -2**70 included), floats, bools, None, non-ASCII text, tuples of 0-4 items, nested
  // dicts and a frame dict shared three times.
  const std::string p2 =
      "80027d7100285804000000696e747371015d7102284b004b014affffffff4bff4d00014dffff4a000001004a000000808a0500000080008a06000000"
      "0000018a060000000000ff8a08ffffffffffffff7f8a0800000000000000808a090000000000000000018a090000000000000000c065580600000066"
      "6c6f61747371035d710428473ff8000000000000478000000000000000477e37e43c8800759c6558040000006d69736371055d71062888894e580600"
      "000068c3a96c6c6f710758000000007108294b018571094b014b0286710a4b014b024b0387710b284b014b024b034b0474710c6558060000006e6573"
      "746564710d7d710e580100000061710f7d711058010000006271115d71125d7113617373580600000073686172656471145d7115287d711628580400"
      "00006e616d6571175801000000667118580800000066696c656e616d6571195804000000782e7079711a58040000006c696e65711b4b037568165d71"
      "1c68166165752e";
  const std::string p4 =
      "80049526010000000000007d94288c04696e7473945d94284b004b014affffffff4bff4d00014dffff4a000001004a000000808a0500000080008a06"
      "0000000000018a060000000000ff8a08ffffffffffffff7f8a0800000000000000808a090000000000000000018a090000000000000000c0658c0666"
      "6c6f617473945d9428473ff8000000000000478000000000000000477e37e43c8800759c658c046d697363945d942888894e8c0668c3a96c6c6f948c"
      "0094294b0185944b014b0286944b014b024b038794284b014b024b034b047494658c066e6573746564947d948c0161947d948c0162945d945d946173"
      "738c06736861726564945d94287d94288c046e616d65948c0166948c0866696c656e616d65948c04782e7079948c046c696e65944b037568165d9468"
      "166165752e";
  for (const std::string* hex : {&p2, &p4}) {
    auto d = load(from_hex(*hex));
    const auto& root = d.root();
    const auto& ints = d.as_sequence(*d.find(root, "ints"), "ints").items;
    REQUIRE(ints.size() == 15);
    const std::int64_t expect[] = {0, 1, -1, 255, 256, 65535, 65536, INT32_MIN, 2147483648LL, 1LL << 40, -(1LL << 40), INT64_MAX, INT64_MIN};
    for (int k = 0; k < 13; ++k) CHECK(d.as_int(ints[k], "") == expect[k]);
    CHECK(ints[13].kind == pk::Kind::big_int);  // 2**64
    CHECK(ints[14].kind == pk::Kind::big_int);  // -2**70
    CHECK_THROWS_AS(d.as_int(ints[13], "x"), ReadError);
    const auto& fl = d.as_sequence(*d.find(root, "floats"), "").items;
    CHECK(fl[0].f == 1.5);
    CHECK(std::signbit(fl[1].f));
    CHECK(fl[2].f == 1e300);
    const auto& misc = d.as_sequence(*d.find(root, "misc"), "").items;
    REQUIRE(misc.size() == 10);
    CHECK(misc[0].i == 1);
    CHECK(misc[2].is_none());
    CHECK(d.as_string(misc[3], "") == "h\xc3\xa9llo");
    CHECK(d.as_string(misc[4], "").empty());
    for (int k = 5; k < 10; ++k) CHECK(d.container(misc[k]).items.size() == static_cast<std::size_t>(k - 5));
    const auto& shared = d.as_sequence(*d.find(root, "shared"), "").items;
    CHECK(shared[0].ref == shared[1].ref);
    CHECK(d.container(shared[2]).items[0].ref == shared[0].ref);
    CHECK(d.as_int(*d.find(shared[0], "line"), "") == 3);
    CHECK(d.as_sequence(*d.find(*d.find(*d.find(root, "nested"), "a"), "b"), "").items.size() == 1);
  }
  // Protocol 5: bytes, set (EMPTY_SET/ADDITEMS), frozenset and bytearray (BYTEARRAY8).
  auto d = load(from_hex("8005953c000000000000007d94288c0562797465739443030001ff948c03736574948f94284b014b02908c02667394284b0391948c02626194960200"
                         "000000000000616294752e"));
  CHECK(d.text(*d.find(d.root(), "bytes")) == std::string("\0\x01\xff", 3));
  CHECK(d.container(*d.find(d.root(), "set")).items.size() == 2);
  CHECK(d.find(d.root(), "fs")->kind == pk::Kind::set);
  CHECK(d.text(*d.find(d.root(), "ba")) == "ab");
}

TEST_CASE("pickle: opcodes that import or call code are refused", "[pickle][hostile]") {
  // GLOBAL os.system + REDUCE: the classic exploit.
  PickleBuilder g;
  g.proto(2).op('c').text("os\nsystem\n").str("echo pwned").op(0x85).op('R').stop();
  expect_error(g.bytes(), 2, "GLOBAL opcode refused");
  PickleBuilder sg;
  sg.proto(4).str("os").str("system").op(0x93).stop();
  expect_error(sg.bytes(), 14, "STACK_GLOBAL opcode refused");
  // Every other code-running opcode, each after a harmless prefix.
  const std::pair<std::uint8_t, const char*> refused[] = {
      {'R', "REDUCE"}, {'b', "BUILD"}, {'i', "INST"}, {'o', "OBJ"}, {0x81, "NEWOBJ"}, {0x92, "NEWOBJ_EX"},
      {'P', "PERSID"}, {'Q', "BINPERSID"}, {0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"},
      {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"}};
  for (auto [op, name] : refused) {
    PickleBuilder b;
    b.proto(5).empty_list().integer(1).op(op).stop();
    INFO(name);
    expect_error(b.bytes(), 5, std::string(name) + " opcode refused");
  }
}

TEST_CASE("pickle: corrupt input gives a clear error at the right offset", "[pickle][bad]") {
  expect_error({0x80, 0x04, 0xff}, 2, "invalid opcode byte 0xff");
  expect_error({0x80, 0x06, '.'}, 0, "unsupported pickle protocol 6");
  expect_error({0x80, 0x04, 'h', 3, '.'}, 2, "memo index 3 was never stored");
  expect_error({0x80, 0x04, '0', '.'}, 2, "stack underflow");
  expect_error({0x80, 0x04, '.'}, 2, "stack underflow");
  expect_error({0x80, 0x04, 'e', '.'}, 2, "no MARK");
  expect_error({0x80, 0x04, '}', '(', 'K', 1, 'u', '.'}, 6, "odd number of items");
  // A list or dict key: Python's "unhashable type", a corrupt memo reference in practice.
  expect_error({0x80, 0x04, '}', '(', ']', 'K', 1, 'u', '.'}, 7, "unhashable dict key (a list)");
  expect_error({0x80, 0x04, '}', '}', 'K', 1, 's', '.'}, 6, "unhashable dict key (a dict)");
  expect_error({0x80, 0x04, '}', 'K', 1, 'a', '.'}, 5, "APPEND target is a dict");
  expect_error({0x80, 0x04, ']', '(', 'K', 1, 'K', 2, 'u', '.'}, 8, "SETITEMS target is a list");
  expect_error({0x80, 0x04, 0x8b, 0xff, 0xff, 0xff, 0xff, '.'}, 2, "negative byte count");
  // A length field far beyond the data must fail before allocating anything.
  expect_error({0x80, 0x04, 0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 2, "truncated input");
  expect_error({0x80, 0x04, 0x95, 0x00, 0x00, 0x00, 0x01, 0, 0, 0, 0, '.'}, 2, "frame of");
  expect_error({0x80, 0x04, 'I', '1', '2', 'x', '\n', '.'}, 2, "malformed integer literal");
  expect_error({0x80, 0x04, 'I', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '\n', '.'}, 2,
               "does not fit in 64 bits");
  expect_error({0x80, 0x04, 'S', '\'', 'a', '\'', '\n', '.'}, 2, "not supported");
  expect_error({0x80, 0x04, 'K', 1}, 4, "end of data before the STOP opcode");
  expect_error({}, 0, "end of data");
}

TEST_CASE("pickle: truncation at every offset of a small snapshot-like pickle is an error, never a crash", "[pickle][bad]") {
  PickleBuilder b;
  b.proto(4).op(0x95).le(0, 8).empty_dict().memoize().mark();
  b.str("device_traces").empty_list().mark().empty_list().mark();
  for (int k = 0; k < 3; ++k) {
    b.empty_dict().mark().kv("action", k ? "free_completed" : "alloc").kv("addr", 1 << 20).kv("size", 1000 + k);
    b.str("frames").empty_list().mark().empty_dict().mark().kv("filename", "a.py").kv("line", 7).setitems().appends();
    b.setitems();
  }
  b.appends().appends().str("segments").empty_list().setitems().stop();
  const auto& full = b.bytes();
  REQUIRE_NOTHROW(pk::load(full.data(), full.size(), "ok"));
  for (std::size_t n = 0; n < full.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    try {
      pk::load(full.data(), n, "cut.pickle");
      FAIL("a truncated pickle loaded");
    } catch (const ReadError& e) {
      CHECK(e.file() == "cut.pickle");
      CHECK(e.offset() <= n);
    }
  }
}

TEST_CASE("pickle: a huge memo index costs no memory (sparse memo)", "[pickle][hostile]") {
  PickleBuilder b;
  b.proto(4).integer(7).op('r').le(4000000000u, 4).op('0').op('j').le(4000000000u, 4).stop();
  auto d = load(b);
  CHECK(d.as_int(d.root(), "") == 7);
}
