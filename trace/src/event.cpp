// Names of the event model's enums, shared by every tool so that text output agrees.
#include "memcomm/trace/event.hpp"

#include <cctype>
#include <string>

namespace memcomm::prof {

const char* kind_name(EventKind k) {
  switch (k) {
    case EventKind::Alloc: return "alloc";
    case EventKind::FreeRequested: return "free_requested";
    case EventKind::FreeCompleted: return "free_completed";
    case EventKind::SegmentAlloc: return "segment_alloc";
    case EventKind::SegmentFree: return "segment_free";
    case EventKind::SegmentMap: return "segment_map";
    case EventKind::SegmentUnmap: return "segment_unmap";
    case EventKind::Oom: return "oom";
    case EventKind::MemSample: return "mem_sample";
    case EventKind::CollEnqueue: return "coll_enqueue";
    case EventKind::CollStart: return "coll_start";
    case EventKind::CollEnd: return "coll_end";
    case EventKind::Kernel: return "kernel";
    case EventKind::Memcpy: return "memcpy";
    case EventKind::Memset: return "memset";
    case EventKind::Launch: return "launch";
    case EventKind::Sync: return "sync";
    case EventKind::RangeBegin: return "range_begin";
    case EventKind::RangeEnd: return "range_end";
    case EventKind::Counter: return "counter";
    case EventKind::Meta: return "meta";
    case EventKind::CommInfo: return "comm_info";
    case EventKind::Drops: return "drops";
    case EventKind::Invalid: break;
  }
  return "unknown";
}

const char* family_name(EventFamily f) {
  switch (f) {
    case EventFamily::Memory: return "memory";
    case EventFamily::Communication: return "communication";
    case EventFamily::Compute: return "compute";
    case EventFamily::Range: return "range";
    case EventFamily::Counter: return "counter";
    case EventFamily::Metadata: return "metadata";
    case EventFamily::Invalid: break;
  }
  return "unknown";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Custom: return "range";
    case Phase::Step: return "step";
    case Phase::MicroStep: return "micro_step";
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Optimizer: return "optimizer";
    case Phase::DataWait: return "data_wait";
    case Phase::Eval: return "eval";
    case Phase::Checkpoint: return "checkpoint";
    case Phase::Comm: return "comm";
    case Phase::Annotation: return "annotation";
    case Phase::Count: break;
  }
  return "unknown";
}

Phase phase_from_name(std::string_view name) {
  std::string n(name);
  for (char& c : n) c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (int p = 1; p < static_cast<int>(Phase::Count); ++p)
    if (n == phase_name(static_cast<Phase>(p))) return static_cast<Phase>(p);
  if (n == "microstep") return Phase::MicroStep;
  if (n == "fwd") return Phase::Forward;
  if (n == "bwd") return Phase::Backward;
  if (n == "optim") return Phase::Optimizer;
  if (n == "datawait" || n == "data") return Phase::DataWait;
  return Phase::Custom;
}

const char* coll_op_name(CollOp op) {
  switch (op) {
    case CollOp::AllReduce: return "all_reduce";
    case CollOp::Broadcast: return "broadcast";
    case CollOp::Reduce: return "reduce";
    case CollOp::AllGather: return "all_gather";
    case CollOp::ReduceScatter: return "reduce_scatter";
    case CollOp::AllToAll: return "all_to_all";
    case CollOp::Send: return "send";
    case CollOp::Recv: return "recv";
    case CollOp::Barrier: return "barrier";
    case CollOp::Gather: return "gather";
    case CollOp::Scatter: return "scatter";
    case CollOp::Unknown: break;
  }
  return "unknown";
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F64: return "f64";
    case DType::I8: return "i8";
    case DType::U8: return "u8";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::F8E4M3: return "f8e4m3";
    case DType::F8E5M2: return "f8e5m2";
    case DType::Unknown: break;
  }
  return "unknown";
}

int dtype_size(DType d) {
  switch (d) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::F64: case DType::I64: return 8;
    case DType::I8: case DType::U8: case DType::F8E4M3: case DType::F8E5M2: return 1;
    case DType::Unknown: break;
  }
  return 0;
}

const char* copy_kind_name(CopyKind c) {
  switch (c) {
    case CopyKind::HtoD: return "HtoD";
    case CopyKind::DtoH: return "DtoH";
    case CopyKind::DtoD: return "DtoD";
    case CopyKind::HtoH: return "HtoH";
    case CopyKind::PtoP: return "PtoP";
    case CopyKind::Unknown: break;
  }
  return "unknown";
}

const char* mem_metric_name(MemMetric m) {
  switch (m) {
    case MemMetric::Allocated: return "allocated";
    case MemMetric::Reserved: return "reserved";
    case MemMetric::Active: return "active";
    case MemMetric::LargestFree: return "largest_free";
    case MemMetric::Fragmentation: return "fragmentation";
    case MemMetric::InactiveSplit: return "inactive_split";
    case MemMetric::DeviceTotal: return "device_total";
    case MemMetric::Count: break;
  }
  return "unknown";
}

const char* meta_key_name(MetaKey k) {
  switch (k) {
    case MetaKey::Rank: return "rank";
    case MetaKey::WorldSize: return "world_size";
    case MetaKey::LocalRank: return "local_rank";
    case MetaKey::Device: return "device";
    case MetaKey::Host: return "host";
    case MetaKey::ProcessName: return "process_name";
    case MetaKey::Pid: return "pid";
    case MetaKey::ClockOffset: return "clock_offset";
    case MetaKey::ThreadName: return "thread_name";
    case MetaKey::StreamName: return "stream_name";
    case MetaKey::DeviceName: return "device_name";
    case MetaKey::Tag: return "tag";
    case MetaKey::StartTime: return "start_time";
    case MetaKey::Count: break;
  }
  return "unknown";
}

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::Parameter: return "parameter";
    case MemCategory::Gradient: return "gradient";
    case MemCategory::OptimizerState: return "optimizer_state";
    case MemCategory::Activation: return "activation";
    case MemCategory::Temporary: return "temporary";
    case MemCategory::CommBuffer: return "comm_buffer";
    case MemCategory::Input: return "input";
    case MemCategory::Unknown: break;
  }
  return "unknown";
}

}  // namespace memcomm::prof
