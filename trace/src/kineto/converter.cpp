#include "converter.hpp"

#include "memcomm/trace/chrome_export.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace memcomm::prof::kineto {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool has(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

CopyKind copy_kind(std::string_view name) {
  if (has(name, "HtoD")) return CopyKind::HtoD;
  if (has(name, "DtoH")) return CopyKind::DtoH;
  if (has(name, "DtoD")) return CopyKind::DtoD;
  if (has(name, "HtoH")) return CopyKind::HtoH;
  if (has(name, "PtoP") || has(name, "Peer")) return CopyKind::PtoP;
  return CopyKind::Unknown;
}

uint8_t small_device(int64_t d) { return uint8_t(std::clamp<int64_t>(d, 0, 254)); }

// "ProfilerStep#12" -> 12
bool profiler_step(std::string_view name, uint64_t& step) {
  constexpr std::string_view kPrefix = "ProfilerStep#";
  if (name.substr(0, kPrefix.size()) != kPrefix || name.size() == kPrefix.size() || name.size() > kPrefix.size() + 18)
    return false;
  step = 0;
  for (char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return false;
    step = step * 10 + uint64_t(c - '0');
  }
  return true;
}

// Note [Phases a torch.profiler trace names]
// A torch.profiler trace marks no phases, but two kinds of host span say what they are by name:
// - "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" (or _MultiProcessing...) is the
//   step's wait for its next batch, loaded in place or waited for from the workers: data wait, as
//   memcomm's own loader wrapper records it, so the step table and advise's loader rule see it.
// - "gloo:all_reduce" (and every other "gloo:" op) is a Gloo collective, the span of the work itself
//   (on one of Gloo's threads, or on the calling thread, where it may outlive the c10d:: op that
//   issued it and is cut to fit as a range): communication, not compute, and a collective of its own
//   (Note [Collectives from communication kernels], with the op from the name, on one communicator
//   for all of them: the span names no process group). Its size is known where the profile recorded
//   shapes: the elements its "Input Dims" name, of its first "Input type" (this rank's part: an
//   all-gather moves the group's). "gloo:send" and "gloo:recv" are communication too, but no
//   collective: they run on some ranks only, and as collectives of the one communicator they
//   shifted every later collective's match across ranks.
// - "c10d::allreduce_" and the other c10d:: operators (and NCCL's "record_param_comms") issue a
//   collective from the calling thread: communication calls, no collective of their own. Usually an
//   enqueue, but on a Gloo DDP run the main thread was seen inside c10d::allreduce_ for as long as
//   the Gloo work it issued (8.7 ms for 8.6 ms), and as an operator it made that wait compute: ~98 %
//   overlap on communication that nothing hid (Note [Breakdown definitions]).
bool data_loader_next(std::string_view name) {
  constexpr std::string_view kPrefix = "enumerate(DataLoader)#", kSuffix = ".__next__";
  return name.size() > kPrefix.size() + kSuffix.size() && name.substr(0, kPrefix.size()) == kPrefix &&
         name.substr(name.size() - kSuffix.size()) == kSuffix;
}

bool c10d_call(std::string_view name) { return name.substr(0, 6) == "c10d::" || name == "record_param_comms"; }

bool point_to_point(std::string_view op) { return op.substr(0, 4) == "send" || op.substr(0, 4) == "recv"; }

CommKernelRule checked_rule(const std::string& pattern) {
  if (std::string problem = comm_kernels_problem(pattern); !problem.empty())
    throw TraceError("--comm-kernels: " + problem);
  return CommKernelRule(pattern);
}

}  // namespace

Converter::Converter(std::string name, const KinetoOptions& opt)
    : name_(std::move(name)), comm_rule_(checked_rule(opt.comm_kernels)) {}

Converter::~Converter() = default;

Converter::Kind Converter::kind_of(std::string_view cat) {
  for (Category& c : categories_)
    if (c.name == cat) {
      ++c.count;
      return c.kind;
    }
  const std::string l = lower(cat);
  Kind k = Kind::Generic;
  if (l == "cpu_op" || l == "operator") k = Kind::Range;
  else if (l == "user_annotation") k = Kind::Annotation;
  else if (l == "trace") k = Kind::Window;
  else if (l == "python_function") k = Kind::PythonFrame;
  else if (l == "gpu_user_annotation") k = Kind::GpuAnnotation;
  else if (has(l, "runtime") || has(l, "driver")) k = Kind::Launch;
  else if (l == "kernel") k = Kind::Kernel;
  else if (l == "gpu_memcpy" || l == "memcpy") k = Kind::Memcpy;
  else if (l == "gpu_memset" || l == "memset") k = Kind::Memset;
  else if (l == "cuda_sync") k = Kind::DeviceSync;
  else if (l == "cpu_instant_event") k = Kind::Instant;
  else if (l == "ac2g" || l == "fwdbwd" || l == "overhead" || l.empty()) k = Kind::Known;
  categories_.push_back({std::string(cat), k, 1});
  return k;
}

bool Converter::times(const RawEvent& e, bool need_dur, int64_t& begin, int64_t& end) {
  bool sub_us = false;
  if (!e.ts.present) return skip("no timestamp"), false;
  if (!us_to_ns(e.ts, begin, sub_us)) return skip("timestamp not a finite number in range"), false;
  info_.float_timestamps |= sub_us;
  end = begin;
  if (!need_dur) return true;
  int64_t dur = 0;
  if (!e.dur.present) return skip("complete event without a duration"), false;
  if (!us_to_ns(e.dur, dur, sub_us)) return skip("duration not a finite number in range"), false;
  if (dur < 0) return skip("negative duration"), false;
  info_.float_timestamps |= sub_us;
  end = begin + dur;
  return true;
}

void Converter::member(std::string_view key, std::string_view raw) {
  if (parser_.parse_member(key, raw, top_)) return;
  const std::string_view expected = key == "distributedInfo" || key == "otherData"          ? "an object"
                                    : key == "deviceProperties"                             ? "an array"
                                    : key == "baseTimeNanoseconds" || key == "schemaVersion" ? "an integer"
                                                                                             : "a string";
  skip(fmt::format("top-level '{}' is not {} (not used)", key, expected));
}

void Converter::event(std::string_view raw, size_t readable_after) {
  if (!parser_.parse(raw, readable_after, raw_, error_)) return malformed(error_);
  convert(raw_);
}

void Converter::malformed(const std::string& error) {
  ++info_.trace_events;
  if (error.compare(0, kBrokenJson.size(), kBrokenJson) == 0)  // corrupt, as --help says: not skipped
    throw TraceError(fmt::format("{}: traceEvents element {} is {}", name_, info_.trace_events,
                                 error.substr(0, kBrokenJson.size() - 2) + " (" + error.substr(kBrokenJson.size()) + ")"));
  skip(fmt::format("malformed event ({})", error));
}

void Converter::convert(const RawEvent& e) {
  ++info_.trace_events;
  const std::string_view ph = e.ph;
  const Kind kind = kind_of(e.cat.empty() ? std::string_view("<none>") : e.cat);
  if (ph == "X") return on_complete(e, kind);
  if (ph == "i" || ph == "I") return on_instant(e, kind);
  if (ph == "s" || ph == "t" || ph == "f") return void(++info_.flows);
  if (ph == "M") return on_metadata(e);
  if (ph == "C") return on_counter(e);
  skip(ph.empty() ? std::string("no \"ph\"") : fmt::format("ph \"{}\" (not written by torch.profiler)", ph));
}

void Converter::on_complete(const RawEvent& e, Kind kind) {
  int64_t begin = 0, end = 0;
  if (!times(e, true, begin, end)) return;
  min_ts_ = std::min(min_ts_, begin);
  switch (kind) {
    case Kind::Launch: {
      const StringId name = strings_.intern(e.name);
      const auto corr = uint32_t(e.correlation == kNoArg ? 0 : e.correlation);
      const EventKind k = has(e.name, "Synchronize") ? EventKind::Sync : EventKind::Launch;
      if (end - begin > int64_t(kMaxDuration)) ++info_.saturated_durations;
      events_.push_back(Event::from(make_host_span(k, begin, end, tracks_.host_thread(e.pid, e.tid), name, corr)));
      return;
    }
    case Kind::Kernel: case Kind::Memcpy: case Kind::Memset: case Kind::DeviceSync:
      return add_device_span(e, kind, begin, end);
    case Kind::GpuAnnotation:
      return add_range(e, begin, end, 0, true);
    case Kind::Annotation:
      return add_range(e, begin, end, tracks_.host_thread(e.pid, e.tid), false, true);
    case Kind::Window:  // "PyTorch Profiler (N)": the recording's own window, no work (it held every
      return;           // operator, and a CPU trace's compute was all of it, its Gloo waits too)
    case Kind::PythonFrame:  // Note [Host spans that overlap] (host_ranges.hpp)
      return add_range(e, begin, end, tracks_.python_lane(e.pid, e.tid), false);
    case Kind::Generic:
      if (e.stream != kNoArg && e.stream != -1) {  // a device's work (MTIA's mtia_ccp_events): as HTA reads it
        ++info_.device_generic[std::string(e.cat)];
        return add_device_span(e, Kind::Kernel, begin, end);
      }
      ++info_.generic[std::string(e.cat.empty() ? "<none>" : e.cat)];
      [[fallthrough]];
    default:
      return add_range(e, begin, end, tracks_.host_thread(e.pid, e.tid), false);
  }
}

void Converter::add_range(const RawEvent& e, int64_t begin, int64_t end, uint16_t thread, bool gpu, bool annotation) {
  HostSpan s{begin, end, 0, strings_.intern(e.name), thread, annotation ? Phase::Annotation : Phase::Custom};
  if (gpu) {
    const int64_t device = e.device != kNoArg ? e.device : e.pid.number;
    const int64_t stream = e.stream != kNoArg ? e.stream : e.tid.number;
    s.thread = uint16_t(kGpuAnnotationThreadBase | tracks_.annotation_lane(device, stream));
  } else if (profiler_step(e.name, s.id)) {
    s.phase = Phase::Step;
  } else if (data_loader_next(e.name)) {  // Note [Phases a torch.profiler trace names]
    s.phase = Phase::DataWait;
    ++info_.data_waits;
  } else if (gloo_op(e.name)) {
    s.phase = Phase::Comm;
    if (point_to_point(e.name.substr(5))) return spans_.push_back(s);
    ++info_.host_collectives;
    comm_kernels_.push_back({begin, end, 0, s.name, strings_.intern(e.name.substr(5)), strings_.intern(e.input_type),
                             strings_.intern(""), strings_.intern(""), e.input_elements, kNoArg, kNoArg,
                             kHostCollectiveStream, 0, 0});
  } else if (c10d_call(e.name)) {
    s.phase = Phase::Comm;
  } else if (nccl_annotation(e.name) && e.input_elements != kNoArg) {
    annotation_sizes_.emplace(spans_.size(), std::make_pair(e.input_elements, strings_.intern(e.input_type)));
  }
  spans_.push_back(s);
}

bool Converter::is_comm_kernel(StringId name) {
  auto it = comm_names_.find(name);
  if (it != comm_names_.end()) return it->second;
  const bool comm = comm_rule_.matches(strings_.text(name));
  comm_names_.emplace(name, comm);
  return comm;
}

void Converter::add_device_span(const RawEvent& e, Kind kind, int64_t begin, int64_t end) {
  const int64_t device = e.device != kNoArg ? e.device : e.pid.number;
  const int64_t stream_id = e.stream != kNoArg ? e.stream : e.tid.number;
  const uint8_t stream = tracks_.stream(device, stream_id);
  const auto corr = uint32_t(e.correlation == kNoArg ? 0 : e.correlation);
  if (end - begin > int64_t(kMaxDuration)) ++info_.saturated_durations;
  if (device < 0) skip("GPU events on a negative device (read as device 0)");
  else if (device >= kHostDevice) skip(fmt::format("GPU events on a device above {0} (read as device {0})", kHostDevice - 1));
  const uint8_t dev = small_device(device);
  if (kind == Kind::Memcpy || kind == Kind::Memset) {
    const uint32_t bytes = encode_bytes32(uint64_t(std::max<int64_t>(e.bytes, 0)));
    const EventKind k = kind == Kind::Memcpy ? EventKind::Memcpy : EventKind::Memset;
    const auto sub = uint8_t(kind == Kind::Memcpy ? copy_kind(e.name) : CopyKind::Unknown);
    events_.push_back(Event::from(make_compute(k, begin, end, stream, bytes, corr, dev, sub)));
    return;
  }
  const StringId name = strings_.intern(e.name);
  if (kind == Kind::DeviceSync) {
    const uint8_t wide = e.stream == kNoArg || e.stream == -1 ? kDeviceWideSync : 0;
    events_.push_back(Event::from(make_compute(EventKind::Sync, begin, end, stream, name, corr, dev, wide)));
    return;
  }
  const bool comm = is_comm_kernel(name);
  events_.push_back(Event::from(make_compute(EventKind::Kernel, begin, end, stream, name, corr, dev, comm ? 1 : 0)));
  if (!comm) return;
  ++info_.comm_kernels;
  comm_kernels_.push_back({begin, end, corr, name, strings_.intern(e.collective), strings_.intern(e.dtype),
                           strings_.intern(e.pg_name), strings_.intern(e.pg_ranks), e.in_nelems, e.out_nelems,
                           e.group_size, stream_id, dev, stream});
}

namespace {
// libkineto's own marks of its recording window, global instants with no category: they mark no
// work, and the window's end comes milliseconds after the last event (a trace read 22-39 % longer).
bool is_window_mark(std::string_view name) {
  return name == "Record Window End" || name.substr(0, 17) == "Iteration Start: ";
}
}  // namespace

void Converter::on_instant(const RawEvent& e, Kind kind) {
  if (e.cat.empty() && is_window_mark(e.name)) return;  // read, as the window's own span is, and no work
  int64_t ts = 0, unused = 0;
  if (!times(e, false, ts, unused)) return;
  min_ts_ = std::min(min_ts_, ts);
  if (e.name == "[memory]") return on_memory(e, ts, false);
  if (e.name == "[OutOfMemory]") return on_memory(e, ts, true);
  if (kind == Kind::Generic) ++info_.generic[std::string(e.cat.empty() ? "<none>" : e.cat)];
  add_range(e, ts, ts, tracks_.host_thread(e.pid, e.tid), false, kind == Kind::Annotation);
}

void Converter::on_memory(const RawEvent& e, int64_t ts, bool oom) {
  if (e.mem_bytes == kNoArg) return skip("[memory] event without Bytes (missing, or not an integer in range)");
  if (e.device_type != 0 && e.device_id != kNoArg && (e.device_id < 0 || e.device_id >= kHostDevice))
    return skip(fmt::format("[memory] event on a device id outside 0-{}", kHostDevice - 1));
  const uint8_t device = e.device_type == 0 ? kHostDevice : small_device(e.device_id == kNoArg ? 0 : e.device_id);
  ++info_.memory_events;
  if (oom) {
    OomEvent o{};
    o.ts = ts;
    o.kind = EventKind::Oom;
    o.device = device;
    o.requested = uint64_t(std::max<int64_t>(e.mem_bytes, 0));
    events_.push_back(Event::from(o));
    return;
  }
  const uint64_t size = e.mem_bytes < 0 ? uint64_t(-(e.mem_bytes + 1)) + 1 : uint64_t(e.mem_bytes);
  uint64_t addr = e.addr;
  if (!e.has_addr && e.mem_bytes != 0) {  // Note [Memory events without addresses] (size_pairing.hpp)
    ++info_.memory_events_without_addr;
    addr = e.mem_bytes > 0 ? unaddressed_.alloc(ts, device, size) : unaddressed_.free(ts, device, size);
  }
  if (e.mem_bytes > 0) {
    events_.push_back(Event::from(make_mem_block(EventKind::Alloc, ts, addr, size, device)));
  } else if (e.mem_bytes < 0) {
    events_.push_back(Event::from(make_mem_block(EventKind::FreeRequested, ts, addr, size, device)));
    events_.push_back(Event::from(make_mem_block(EventKind::FreeCompleted, ts, addr, size, device)));
  }
  if (e.total_allocated >= 0)
    events_.push_back(Event::from(make_mem_sample(ts, MemMetric::Allocated, uint64_t(e.total_allocated), device)));
  if (e.total_reserved >= 0)
    events_.push_back(Event::from(make_mem_sample(ts, MemMetric::Reserved, uint64_t(e.total_reserved), device)));
}

void Converter::on_metadata(const RawEvent& e) {
  if (e.name == "process_name") tracks_.name_process(e.pid, e.arg_name);
  else if (e.name == "thread_name") tracks_.name_thread(e.pid, e.tid, e.arg_name);
}

void Converter::on_counter(const RawEvent& e) {
  int64_t ts = 0, unused = 0;
  if (!times(e, false, ts, unused)) return;
  min_ts_ = std::min(min_ts_, ts);
  for (const auto& [key, value] : e.counters) {
    const std::string name = e.counters.size() == 1 ? std::string(e.name) : fmt::format("{}.{}", e.name, key);
    events_.push_back(Event::from(make_counter(ts, strings_.intern(name), value)));
  }
}

void Converter::emit_metadata(int64_t ts, bool epoch) {
  auto meta = [&](MetaKey k, int64_t value, std::string_view text = {}, uint16_t thread = 0) {
    events_.push_back(Event::from(make_meta(ts, k, value, strings_.intern(text), thread)));
  };
  meta(MetaKey::Rank, rank_);
  if (world_size_) meta(MetaKey::WorldSize, world_size_);
  if (!top_.host.empty()) meta(MetaKey::Host, 0, top_.host);
  if (epoch) meta(MetaKey::StartTime, kKinetoEpochNs);  // the origin, for traces on the Unix clock
  meta(MetaKey::Tag, 0, kKinetoSourceTag);
  for (const TopLevel::Device& d : top_.devices) {
    if (!d.name.empty()) meta(MetaKey::DeviceName, 0, d.name, uint16_t(std::min<int64_t>(d.id, 0xFFFF)));
    if (d.total_memory) events_.push_back(Event::from(make_mem_sample(ts, MemMetric::DeviceTotal, d.total_memory, small_device(d.id))));
  }
  std::string process;
  int64_t pid = -1;
  tracks_.emit_meta(ts, strings_, events_, process, pid);
  if (!process.empty()) meta(MetaKey::ProcessName, 0, process);
  if (pid >= 0) meta(MetaKey::Pid, pid);
}

void Converter::take_top_level() {
  info_.rank_given = top_.rank >= 0 && top_.rank < (1 << 24);
  if (info_.rank_given) rank_ = uint32_t(top_.rank);
  else if (top_.rank_unreadable) skip("distributedInfo rank not an integer (read as rank 0)");
  else if (top_.rank < -1 || top_.rank >= (1 << 24)) skip("distributedInfo rank out of range (read as rank 0)");
  if (top_.world_size > 0 && top_.world_size < (1 << 24)) world_size_ = uint32_t(top_.world_size);
  else if (top_.world_size_unreadable) skip("distributedInfo world_size not an integer (not used)");
  else if (top_.world_size == 0 || top_.world_size < -1 || top_.world_size >= (1 << 24))
    skip("distributedInfo world_size out of range (not used)");
  if (info_.rank_given && top_.world_size > 0 && top_.rank >= top_.world_size)
    skip("distributedInfo rank not below its world_size (both used as given)");
  if (top_.base_time_ns > 0 && top_.base_time_ns < kKinetoEpochNs * 2) info_.base_time_ns = top_.base_time_ns;
  info_.schema_version = int(std::clamp<int64_t>(top_.schema_version, 0, 1 << 20));
  info_.display_time_unit = top_.display_time_unit;
}

// Note [Collectives named by their host annotation]: a communication kernel names its collective in
// its "Collective name" argument, but older traces have none, and NCCL runs an all-to-all as
// SendRecv kernels: a DLRM run's all-to-alls read as sends of 0 bytes. The host side names it
// either way: PyTorch's record_param_comms puts an "nccl:all_to_all" annotation around the launch.
// So a communication kernel without the argument takes its collective from the "nccl:" host span,
// on its launch's thread, that holds the launch. Those traces name no size on the kernel either
// ("In msg nelems"), but with record_shapes the annotation has the input's ("Input Dims", "Input
// type"): this rank's part, as Gloo's spans give it, which the kernel takes where it has none.
void Converter::name_collectives_from_host() {
  const auto unnamed = [this](const CommKernel& k) { return strings_.text(k.collective).empty(); };
  const auto sizeless = [](const CommKernel& k) { return k.in_nelems == kNoArg && k.out_nelems == kNoArg; };
  std::unordered_map<uint32_t, std::pair<uint16_t, int64_t>> launches;  // corr -> (thread, ts)
  for (const CommKernel& k : comm_kernels_)
    if (k.corr != 0 && (unnamed(k) || sizeless(k))) launches.emplace(k.corr, std::make_pair(uint16_t(0), INT64_MIN));
  if (launches.empty()) return;
  for (const Event& e : events_)
    if (e.kind == EventKind::Launch) {
      const auto c = e.as<ComputeEvent>();
      auto it = launches.find(c.corr);
      if (it != launches.end()) it->second = {c.thread(), c.ts};
    }
  std::unordered_map<uint16_t, std::vector<size_t>> annotations;  // by thread: indexes into spans_, by begin
  for (size_t i = 0; i < spans_.size(); ++i)
    if (nccl_annotation(strings_.text(spans_[i].name))) annotations[spans_[i].thread].push_back(i);
  for (auto& [thread, v] : annotations)
    std::stable_sort(v.begin(), v.end(), [this](size_t a, size_t b) { return spans_[a].begin < spans_[b].begin; });
  for (CommKernel& k : comm_kernels_) {
    auto it = k.corr != 0 && (unnamed(k) || sizeless(k)) ? launches.find(k.corr) : launches.end();
    if (it == launches.end() || it->second.second == INT64_MIN) continue;
    const auto [thread, ts] = it->second;
    const auto& v = annotations[thread];
    // The last annotation to begin at or before the launch (they do not nest in one another).
    auto at = std::upper_bound(v.begin(), v.end(), ts, [this](int64_t t, size_t s) { return t < spans_[s].begin; });
    if (at == v.begin() || spans_[*std::prev(at)].end < ts) continue;
    const size_t span = *std::prev(at);
    if (unnamed(k)) k.collective = strings_.intern(std::string(strings_.text(spans_[span].name).substr(5)));
    const auto size = annotation_sizes_.find(span);
    if (sizeless(k) && size != annotation_sizes_.end()) {
      k.in_nelems = size->second.first;
      if (strings_.text(k.dtype).empty()) k.dtype = size->second.second;
    }
  }
}

// Note [JSON of another tool]: Chrome's trace format is shared by many tools (Triton Inference
// Server, tlparse, Perfetto's JSON), and the late-2020 torch.profiler schema is a bare array of
// events with nothing else to recognise it by. Such a file reads event by event; when not one of its
// events is a timed event torch.profiler writes (a span, a kernel, an instant, a [memory] event), it
// is not a torch.profiler trace, and the skip reasons say what it held instead.
void Converter::throw_no_torch_event() const {
  std::vector<std::pair<uint64_t, std::string>> why;
  for (const auto& [reason, n] : info_.skipped) why.emplace_back(n, reason);
  std::sort(why.rbegin(), why.rend());
  std::string reasons;
  for (size_t i = 0; i < why.size() && i < 3; ++i)
    reasons += fmt::format("{}{} ({})", i ? "; " : "", why[i].second, why[i].first);
  if (info_.trace_events == 0)  // README: such JSON is refused; an empty list is the least of it
    throw TraceError(fmt::format("{}: its traceEvents list is empty: no event to read", name_));
  throw TraceError(fmt::format("{}: not a torch.profiler trace: none of its {} traceEvents is an event torch.profiler "
                               "writes{}", name_, info_.trace_events, reasons.empty() ? "" : ": " + reasons));
}

KinetoTrace Converter::finish(const SplitResult& split) {
  KinetoTrace out;
  info_.json_bytes = split.json_bytes;
  info_.truncated = split.truncated;
  info_.truncated_at = split.truncated_at;
  if (split.truncated)
    info_.truncation = fmt::format("{}: the file ends early (cut short?); loaded the {} events up to JSON byte {}",
                                   name_, split.events, split.truncated_at);
  // Its events are memcomm's own, renamed for Perfetto (a launch's category is "launch", a sync on a
  // stream sits on the stream's lane): read as torch.profiler's, they gave other figures with no word.
  if (top_.producer == kChromeExportProducer)
    throw TraceError(fmt::format("{}: a Chrome trace written by memcomm-trace export (for Perfetto and "
                                 "chrome://tracing), not a torch.profiler trace: open the trace it was exported from",
                                 name_));
  for (const Category& c : categories_) info_.categories[c.name] += c.count;
  // A real trace cut short before its first timed event (Kineto writes its metadata first) is a
  // file cut short, which the truncation warning says, not another tool's JSON.
  if (min_ts_ == INT64_MAX && !split.truncated) throw_no_torch_event();
  if (tracks_.overflowed()) skip("tracks beyond the lanes memcomm keeps (merged into the last lane)");
  // Note [One origin for every torch.profiler trace]; baseTimeNanoseconds comes after the events.
  take_top_level();
  unaddressed_.emit_samples(events_);
  const bool epoch = info_.base_time_ns > 0 || min_ts_ == INT64_MAX || min_ts_ >= kUnixTimeFloorNs;
  const int64_t shift = epoch ? info_.base_time_ns - kKinetoEpochNs : 0;
  for (Event& e : events_) e.ts += shift;
  for (HostSpan& s : spans_) s.begin += shift, s.end += shift;
  for (CommKernel& k : comm_kernels_) k.begin += shift, k.end += shift;
  name_collectives_from_host();
  emit_nested_ranges(spans_, events_, info_.clamped_ranges);
  spans_ = {};
  emit_collectives(comm_kernels_, strings_, rank_, world_size_, events_);
  emit_metadata(min_ts_ == INT64_MAX ? 0 : min_ts_ + shift, epoch);
  info_.converted = events_.size();
  out.trace.rank = rank_;
  out.trace.world_size = world_size_;
  out.trace.source = name_;
  out.trace.events = std::move(events_);
  out.trace.strings = strings_.take();
  out.info = std::move(info_);
  return out;
}

}  // namespace memcomm::prof::kineto
