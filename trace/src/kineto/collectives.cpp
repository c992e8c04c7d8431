#include "collectives.hpp"
#include "raw_event.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <unordered_map>

namespace memcomm::prof::kineto {
namespace {

std::string lower_letters(std::string_view s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c))) out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// FNV-1a: a stable 64-bit name hash (the same on every rank and every run).
uint64_t name_hash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

// This rank's place in "[0, 8, 16]", or -1.
int place_in(std::string_view ranks, uint32_t rank) {
  int place = 0;
  size_t i = 0;
  while (i < ranks.size()) {
    while (i < ranks.size() && !std::isdigit(static_cast<unsigned char>(ranks[i]))) ++i;
    if (i == ranks.size()) break;
    uint64_t v = 0;
    for (; i < ranks.size() && std::isdigit(static_cast<unsigned char>(ranks[i])) && v < (1ull << 40); ++i)
      v = v * 10 + uint64_t(ranks[i] - '0');
    if (v == rank) return place;
    ++place;
  }
  return -1;
}

struct Comm {
  uint8_t index;
  uint32_t next_seq = 0;
  uint16_t size = 0;
  int place = -1;
  uint64_t hash;
};

}  // namespace

CollOp collective_op(std::string_view collective_arg, std::string_view kernel_name) {
  static const std::pair<const char*, CollOp> kOps[] = {
      {"reducescatter", CollOp::ReduceScatter}, {"allreduce", CollOp::AllReduce}, {"allgather", CollOp::AllGather},
      {"alltoall", CollOp::AllToAll},           {"broadcast", CollOp::Broadcast}, {"sendrecv", CollOp::Send},
      {"send", CollOp::Send},                   {"recv", CollOp::Recv},           {"barrier", CollOp::Barrier},
      {"gather", CollOp::Gather},               {"scatter", CollOp::Scatter},     {"reduce", CollOp::Reduce},
      {"dispatch", CollOp::AllToAll},           {"combine", CollOp::AllToAll},
  };
  for (std::string_view text : {collective_arg, kernel_name}) {
    const std::string s = lower_letters(text);
    for (const auto& [token, op] : kOps)
      if (contains(s, token)) return op;
  }
  return CollOp::Unknown;
}

DType collective_dtype(std::string_view dtype_arg, std::string_view kernel_name, CollOp op) {
  static const std::map<std::string, DType> kArgs = {
      {"float", DType::F32},   {"half", DType::F16},    {"bfloat16", DType::BF16}, {"double", DType::F64},
      {"char", DType::I8},     {"byte", DType::U8},     {"int", DType::I32},       {"long", DType::I64},
      {"float8e4m3fn", DType::F8E4M3}, {"float8e5m2", DType::F8E5M2},
      // the C++ names of record_shapes' "Input type" (a gloo: span's)
      {"c10half", DType::F16}, {"c10bfloat16", DType::BF16}, {"longint", DType::I64}, {"signedchar", DType::I8},
      {"unsignedchar", DType::U8}, {"c10float8e4m3fn", DType::F8E4M3}, {"c10float8e5m2", DType::F8E5M2}};
  auto it = kArgs.find(lower_letters(dtype_arg));
  if (it != kArgs.end()) return it->second;
  // Only a reduction's kernel is typed: NCCL moves the data of all-gather, broadcast, all-to-all and
  // send/recv as bytes, and names those kernels ..._Sum_int8_t whatever the tensors hold; so are the
  // SendRecv kernels an older NCCL runs a reduction's steps with.
  if (op != CollOp::AllReduce && op != CollOp::ReduceScatter && op != CollOp::Reduce) return DType::Unknown;
  if (contains(lower_letters(kernel_name), "sendrecv")) return DType::Unknown;
  // Kernel names end in the element type: ..._Sum_float(, ..._f32_RING_LL, ..._bf16
  static const std::pair<const char*, DType> kSuffixes[] = {
      {"_bf16", DType::BF16},   {"bfloat16", DType::BF16}, {"_half", DType::F16},   {"_f16", DType::F16},
      {"_float", DType::F32},   {"_f32", DType::F32},      {"_double", DType::F64}, {"_f64", DType::F64},
      {"_uint8_t", DType::U8},  {"_u8", DType::U8},        {"_int8_t", DType::I8},  {"_i8", DType::I8},
      {"_int32_t", DType::I32}, {"_i32", DType::I32},      {"_int64_t", DType::I64}, {"_i64", DType::I64},
      {"_f8e4m3", DType::F8E4M3}, {"_f8e5m2", DType::F8E5M2}};
  for (const auto& [suffix, dt] : kSuffixes)
    if (contains(kernel_name, suffix)) return dt;
  return DType::Unknown;
}

namespace {

// Correlation id -> start of the launch that enqueued it, for the communication kernels.
std::unordered_map<uint32_t, int64_t> launch_times(const std::vector<CommKernel>& kernels,
                                                   const std::vector<Event>& events) {
  std::unordered_map<uint32_t, int64_t> launched;
  for (const CommKernel& k : kernels)
    if (k.corr) launched.emplace(k.corr, INT64_MIN);
  for (const Event& e : events)
    if (e.kind == EventKind::Launch) {
      auto it = launched.find(e.as<ComputeEvent>().corr);
      if (it != launched.end()) it->second = e.ts;
    }
  return launched;
}

// The communicator of a kernel: its process group when named, else its stream. The first kernel
// of each one also emits its CommInfo.
Comm& communicator(std::map<std::string, Comm>& comms, const CommKernel& k, const Interner& strings, uint32_t rank,
                   uint32_t world_size, std::vector<Event>& events) {
  const std::string pg(strings.text(k.pg_name));
  const std::string key = pg.empty() ? "stream " + std::to_string(k.stream_id) : "pg " + pg;
  auto it = comms.find(key);
  if (it != comms.end()) return it->second;
  Comm c;
  c.index = uint8_t(std::min<size_t>(comms.size(), 255));
  c.hash = name_hash(key);
  c.size = uint16_t(k.group_size > 0 && k.group_size < 65536 ? k.group_size : world_size);
  c.place = pg.empty() ? int(rank) : place_in(strings.text(k.pg_ranks), rank);
  events.push_back(Event::from(make_comm_info(k.begin, c.index, c.size, uint16_t(std::max(c.place, 0)), c.hash)));
  return comms.emplace(key, c).first->second;
}

}  // namespace

void emit_collectives(const std::vector<CommKernel>& kernels, const Interner& strings, uint32_t rank,
                      uint32_t world_size, std::vector<Event>& events) {
  if (kernels.empty()) return;
  const auto launched = launch_times(kernels, events);
  std::vector<const CommKernel*> order;
  for (const CommKernel& k : kernels) order.push_back(&k);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  std::map<std::string, Comm> comms;
  for (const CommKernel* k : order) {
    Comm& c = communicator(comms, *k, strings, rank, world_size, events);
    const CollOp op = collective_op(strings.text(k->collective), strings.text(k->kernel));
    const DType dt = collective_dtype(strings.text(k->dtype), strings.text(k->kernel), op);
    int64_t nelems = std::max<int64_t>({k->in_nelems, k->out_nelems, 0});
    if (k->out_nelems == kNoArg && (op == CollOp::AllGather || op == CollOp::Gather))
      nelems *= c.size;  // only this rank's part is named; the size is the gathered whole (nccl-tests')
    const uint64_t bytes = uint64_t(nelems) * uint64_t(dtype_size(dt));
    const uint32_t seq = c.next_seq++;
    auto launch = k->corr ? launched.find(k->corr) : launched.end();
    if (launch != launched.end() && launch->second != INT64_MIN)
      events.push_back(Event::from(make_collective(EventKind::CollEnqueue, launch->second, op, dt, bytes, c.index, seq)));
    events.push_back(Event::from(make_collective(EventKind::CollStart, k->begin, op, dt, bytes, c.index, seq)));
    events.push_back(Event::from(make_collective(EventKind::CollEnd, k->end, op, dt, bytes, c.index, seq)));
  }
}

}  // namespace memcomm::prof::kineto
