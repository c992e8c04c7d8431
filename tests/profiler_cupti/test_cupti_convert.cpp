// ActivityConverter fed hand-made CUPTI records (no GPU, no CUPTI session): Note [CUPTI record mapping].
#include <cstring>
#include <string>
#include <vector>

#include "memcomm/profiler/cupti_convert.hpp"
#include "memcomm/trace/string_table.hpp"
#include "memcomm_test.hpp"

using namespace memcomm::prof;

namespace {

struct Fixture {
  StringTable strings;
  ActivityConverter conv{[this](std::string_view s) { return strings.intern(s); }};
  std::vector<Event> out;

  template <class T>
  size_t feed(const T& rec) {
    return conv.convert(*reinterpret_cast<const CUpti_Activity*>(&rec), out);
  }
  // The non-metadata events produced so far.
  std::vector<Event> spans() const {
    std::vector<Event> v;
    for (const Event& e : out)
      if (e.kind != EventKind::Meta) v.push_back(e);
    return v;
  }
  std::string text(StringId id) const { return strings.text(id); }
};

CUpti_ActivityKernel10 kernel(const char* name, uint64_t start, uint64_t end, uint32_t corr, uint32_t stream = 7,
                              uint32_t device = 0) {
  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof k);
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = name;
  k.start = start;
  k.end = end;
  k.correlationId = corr;
  k.streamId = stream;
  k.deviceId = device;
  return k;
}

CUpti_ActivityMemory4 memory(CUpti_ActivityMemoryOperationType op, uint64_t addr, uint64_t bytes, bool pooled,
                             CUpti_ActivityMemoryKind mk = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) {
  CUpti_ActivityMemory4 m;
  std::memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m.memoryOperationType = op;
  m.memoryKind = mk;
  m.address = addr;
  m.bytes = bytes;
  m.timestamp = 5000;
  m.deviceId = 1;
  m.streamId = 13;
  m.isAsync = pooled;
  m.memoryPoolConfig.memoryPoolType = pooled ? CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL : CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID;
  return m;
}

CUpti_ActivityMarker2 marker(uint32_t flags, uint32_t id, const char* name, const char* domain, uint64_t ts,
                             uint32_t tid) {
  CUpti_ActivityMarker2 m;
  std::memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MARKER;
  m.flags = CUpti_ActivityFlag(flags);
  m.id = id;
  m.name = name;
  m.domain = domain;
  m.timestamp = ts;
  m.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  m.objectId.pt.threadId = tid;
  return m;
}

}  // namespace

TEST_CASE("kernel records become named Kernel spans on a per-stream index", "[cupti][unit]") {
  Fixture f;
  REQUIRE(f.feed(kernel("_Z6addOnePfi", 1000, 4000, 42)) == 2);  // StreamName, then the kernel
  REQUIRE(f.out[0].kind == EventKind::Meta);
  const auto meta = f.out[0].as<MetaEvent>();
  CHECK(meta.key == MetaKey::StreamName);
  CHECK(f.text(meta.str).find("stream 7") != std::string::npos);

  const auto k = f.out[1].as<ComputeEvent>();
  CHECK(k.kind == EventKind::Kernel);
  CHECK(k.ts == 1000);
  CHECK(k.duration() == 3000);
  CHECK(k.corr == 42);
  CHECK(k.device == 0);
  CHECK(k.stream == meta.thread);
  CHECK(k.sub == 0);
  CHECK(f.text(k.arg) == "addOne(float*, int)");  // demangled

  // Same stream: no new metadata; another stream: a new index.
  REQUIRE(f.feed(kernel("_Z6addOnePfi", 5000, 6000, 43)) == 1);
  CHECK(f.out.back().as<ComputeEvent>().stream == k.stream);
  REQUIRE(f.feed(kernel("_Z6addOnePfi", 5000, 6000, 44, 8)) == 2);
  CHECK(f.out.back().as<ComputeEvent>().stream != k.stream);
  CHECK(f.conv.stats().records == 3);
  CHECK(f.conv.stats().events == 5);
  CHECK(f.conv.devices_seen() == 1);
}

TEST_CASE("NCCL kernels are flagged as communication", "[cupti][unit]") {
  Fixture f;
  f.feed(kernel("_Z31ncclDevKernel_AllReduce_Sum_f32v", 100, 900, 1));
  f.feed(kernel("_Z6addOnePfi", 1000, 1100, 2));
  const auto sp = f.spans();
  REQUIRE(sp.size() == 2);
  CHECK(sp[0].as<ComputeEvent>().sub == 1);
  CHECK(f.text(sp[0].as<ComputeEvent>().arg) == "ncclDevKernel_AllReduce_Sum_f32()");
  CHECK(sp[1].as<ComputeEvent>().sub == 0);
  CHECK(f.conv.stats().comm_kernels == 1);

  // The trace layer's default rule, as the torch.profiler reader applies it: mangled or not.
  const CommKernelRule comm;
  CHECK(comm.matches("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"));
  CHECK(comm.matches("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"));
  CHECK(comm.matches("_Z31ncclDevKernel_AllReduce_Sum_f32v"));
  CHECK(comm.matches("_ZN43_GLOBAL__N__b4148644_10_onerank_cu_fdf4799013oneRankReduceI13FuncPreMulSumIfEEEvPvS3_mmb"));
  CHECK(comm.matches(demangle("_ZN43_GLOBAL__N__b4148644_10_onerank_cu_fdf4799013oneRankReduceI13FuncPreMulSumIfEEEvPvS3_mmb")));
  CHECK_FALSE(comm.matches("void at::native::vectorized_elementwise_kernel<4, float>(int)"));
  CHECK_FALSE(comm.matches(""));
}

TEST_CASE("memcpy and memset records carry bytes and copy kind", "[cupti][unit]") {
  Fixture f;
  CUpti_ActivityMemcpy6 c;
  std::memset(&c, 0, sizeof c);
  c.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  c.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  c.bytes = 4096;
  c.start = 10'000;
  c.end = 12'500;
  c.correlationId = 9;
  c.streamId = 3;
  f.feed(c);
  c.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  c.bytes = 3ull << 30;  // above 2 GiB: KiB granularity
  f.feed(c);

  CUpti_ActivityMemset4 s;
  std::memset(&s, 0, sizeof s);
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 1 << 20;
  s.start = 20'000;
  s.end = 20'300;
  s.streamId = 3;
  f.feed(s);

  const auto sp = f.spans();
  REQUIRE(sp.size() == 3);
  const auto h2d = sp[0].as<ComputeEvent>();
  CHECK(h2d.kind == EventKind::Memcpy);
  CHECK(CopyKind(h2d.sub) == CopyKind::HtoD);
  CHECK(decode_bytes32(h2d.arg) == 4096);
  CHECK(h2d.duration() == 2500);
  CHECK(h2d.corr == 9);
  CHECK(CopyKind(sp[1].as<ComputeEvent>().sub) == CopyKind::DtoH);
  CHECK(decode_bytes32(sp[1].as<ComputeEvent>().arg) == 3ull << 30);
  CHECK(sp[2].kind == EventKind::Memset);
  CHECK(decode_bytes32(sp[2].as<ComputeEvent>().arg) == 1u << 20);
  CHECK(sp[2].as<ComputeEvent>().duration() == 300);

  CHECK(copy_kind_from_cupti(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD) == CopyKind::DtoD);
  CHECK(copy_kind_from_cupti(CUPTI_ACTIVITY_MEMCPY_KIND_PTOP) == CopyKind::PtoP);
  CHECK(copy_kind_from_cupti(CUPTI_ACTIVITY_MEMCPY_KIND_HTOH) == CopyKind::HtoH);
  CHECK(copy_kind_from_cupti(CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN) == CopyKind::Unknown);
}

TEST_CASE("MEMORY2: driver allocations are segments, pool allocations are blocks", "[cupti][unit]") {
  Fixture f;
  const uint64_t addr = 0x7f12'3456'0000ull;
  f.feed(memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, addr, 1ull << 33, false));
  f.feed(memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, addr + 4096, 1 << 20, true));
  f.feed(memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, addr + 4096, 1 << 20, true));
  f.feed(memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, addr, 1ull << 33, false));
  f.feed(memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 0x1000, 64, false, CUPTI_ACTIVITY_MEMORY_KIND_PINNED));
  f.feed(memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_INVALID, 0x1000, 64, false));

  const auto sp = f.spans();
  REQUIRE(sp.size() == 5);
  const auto seg = sp[0].as<MemBlockEvent>();
  CHECK(seg.kind == EventKind::SegmentAlloc);
  CHECK(seg.addr() == addr);
  CHECK(seg.size() == 1ull << 33);
  CHECK(seg.device == 1);
  CHECK(seg.ts == 5000);
  CHECK(sp[1].kind == EventKind::Alloc);
  CHECK(sp[1].as<MemBlockEvent>().addr() == addr + 4096);
  CHECK(sp[2].kind == EventKind::FreeRequested);
  CHECK(sp[3].kind == EventKind::SegmentFree);
  CHECK(sp[4].as<MemBlockEvent>().device == kHostDevice);
  CHECK(f.conv.stats().ignored == 1);
  // The pooled (stream-ordered) ones name their stream; one StreamName record for it.
  size_t metas = 0;
  for (const Event& e : f.out) metas += e.kind == EventKind::Meta;
  CHECK(metas == 1);
  CHECK(sp[1].as<MemBlockEvent>().stream == sp[2].as<MemBlockEvent>().stream);

  f.conv.set_skip_host_memory(true);
  CHECK(f.feed(memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 0x2000, 64, false,
                      CUPTI_ACTIVITY_MEMORY_KIND_PINNED)) == 0);
  CHECK(f.conv.stats().ignored == 2);
  CHECK(f.feed(memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 0x3000, 64, false)) == 1);  // device: kept
}

TEST_CASE("MEMORY2: module globals are not segments", "[cupti][unit]") {
  Fixture f;
  for (const auto kind : {CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC, CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC})
    CHECK(f.feed(memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 0x7f00'0000'0100ull, 15, false, kind)) == 0);
  CHECK(f.conv.stats().ignored == 2);
  CHECK(f.feed(memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 0x7f00'0020'0000ull, 2 << 20, false,
                      CUPTI_ACTIVITY_MEMORY_KIND_DEVICE)) == 1);
}

TEST_CASE("synchronization records are Sync spans on the cuda sync pseudo-thread", "[cupti][unit]") {
  Fixture f;
  CUpti_ActivitySynchronization2 s;
  std::memset(&s, 0, sizeof s);
  s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  s.start = 100;
  s.end = 700;
  s.correlationId = 77;
  REQUIRE(f.feed(s) == 2);
  REQUIRE(f.feed(s) == 1);  // the thread is named once
  const auto e = f.spans().at(0).as<ComputeEvent>();
  CHECK(e.kind == EventKind::Sync);
  CHECK(e.device == kHostDevice);
  CHECK(e.thread() == kCudaSyncThread);
  CHECK(e.duration() == 600);
  CHECK(f.text(e.arg) == "cudaStreamSynchronize");
}

TEST_CASE("external correlation charges GPU time to the launching phase", "[cupti][unit]") {
  Fixture f;
  const uint64_t ext = make_external_id(Phase::Backward, 12);
  CHECK(external_id_phase(ext) == Phase::Backward);
  CHECK(external_id_range(ext) == 12);
  CHECK(external_id_phase(~0ull) == Phase::Custom);

  CUpti_ActivityExternalCorrelation x;
  std::memset(&x, 0, sizeof x);
  x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  x.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
  x.externalId = ext;
  x.correlationId = 500;
  CHECK(f.feed(x) == 0);
  f.feed(kernel("_Z4gemmv", 1000, 3000, 500));
  f.feed(kernel("_Z4gemmv", 4000, 4500, 501));  // launched outside any phase
  const auto& a = f.conv.attribution();
  CHECK(a.gpu_ns[size_t(Phase::Backward)] == 2000);
  CHECK(a.spans[size_t(Phase::Backward)] == 1);
  CHECK(a.unattributed_spans == 1);

  x.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_OPENACC;  // someone else's ids
  f.feed(x);
  CHECK(f.conv.stats().ignored == 1);
}

TEST_CASE("a span that comes before its external correlation is charged when the correlation comes",
          "[cupti][unit]") {
  Fixture f;
  // The device's buffer (the kernel) completes before the launching thread's (its API record and
  // the external correlation beside it): Note [Spans before their correlation].
  f.feed(kernel("_Z4gemmv", 1000, 3000, 700));
  f.feed(kernel("_Z4gemmv", 3000, 3500, 700));  // a graph launch: one correlation id, two spans
  f.feed(kernel("_Z4gemmv", 4000, 4500, 701));  // launched outside any phase: no correlation ever
  CHECK(f.conv.attribution().unattributed_spans == 3);

  CUpti_ActivityAPI api;
  std::memset(&api, 0, sizeof api);
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  api.correlationId = 700;
  CHECK(f.feed(api) == 0);  // enabled only for the correlation records: no event, not ignored
  CUpti_ActivityExternalCorrelation x;
  std::memset(&x, 0, sizeof x);
  x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  x.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
  x.externalId = make_external_id(Phase::Forward, 3);
  x.correlationId = 700;
  CHECK(f.feed(x) == 0);
  f.feed(kernel("_Z4gemmv", 5000, 5100, 700));  // and one after it
  const auto a = f.conv.attribution();
  CHECK(a.gpu_ns[size_t(Phase::Forward)] == 2600);
  CHECK(a.spans[size_t(Phase::Forward)] == 3);
  CHECK(a.unattributed_spans == 1);
  CHECK(f.conv.stats().ignored == 0);
}

TEST_CASE("NVTX markers become ranges and memcomm's own domain is skipped", "[cupti][unit]") {
  Fixture f;
  f.feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_START, 1, "load batch", "app", 100, 4242));
  f.feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_START, 2, "forward", "memcomm", 150, 4242));
  f.feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_END, 2, nullptr, nullptr, 160, 4242));
  f.feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_END, 1, nullptr, nullptr, 200, 4242));
  f.feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS, 3, "mark", "app", 250, 4242));

  const auto sp = f.spans();
  REQUIRE(sp.size() == 2);
  const auto b = sp[0].as<RangeEvent>(), e = sp[1].as<RangeEvent>();
  CHECK(b.kind == EventKind::RangeBegin);
  CHECK(e.kind == EventKind::RangeEnd);
  CHECK(b.phase == Phase::Custom);
  CHECK(f.text(b.name) == "load batch");
  CHECK(e.name == b.name);
  CHECK(b.ts == 100);
  CHECK(e.ts == 200);
  CHECK(b.thread == (kNvtxThreadBase | 4242));
  CHECK(e.thread == b.thread);
  CHECK(f.conv.stats().ignored == 3);  // own start, own end, instantaneous mark
  // The thread got a name.
  bool named = false;
  for (const Event& ev : f.out)
    if (ev.kind == EventKind::Meta && ev.as<MetaEvent>().key == MetaKey::ThreadName)
      named = f.text(ev.as<MetaEvent>().str) == "nvtx tid 4242";
  CHECK(named);
}

TEST_CASE("incomplete spans, unknown kinds and the clock offset", "[cupti][unit]") {
  Fixture f;
  CHECK(f.feed(kernel("_Z1kv", 0, 0, 1)) == 0);   // forced flush before completion
  CHECK(f.feed(kernel("_Z1kv", 900, 800, 2)) == 0);  // end before start
  CHECK(f.conv.stats().incomplete == 2);

  CUpti_Activity other{CUPTI_ACTIVITY_KIND_DEVICE};
  CHECK(f.feed(other) == 0);
  CHECK(f.conv.stats().ignored == 1);

  f.conv.set_clock_offset(-500);
  f.feed(kernel("_Z1kv", 1000, 2000, 3));
  const auto k = f.spans().back().as<ComputeEvent>();
  CHECK(k.ts == 500);
  CHECK(k.duration() == 1000);

  f.conv.reset();  // streams forgotten: the next span names its stream again
  CHECK(f.feed(kernel("_Z1kv", 1000, 2000, 4)) == 2);
}
