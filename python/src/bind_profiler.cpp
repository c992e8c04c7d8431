// memcomm._memcomm's profiler part: the C++ trainer's run recorder (train::RunProfiler: per-rank .mct
// files, the live stream, the allocator's events and statistics, CUPTI on a GPU) driven from Python,
// plus the few hot calls memcomm/profiler.py's hooks make: phase ranges (also NVTX ranges through the
// recorder's range hooks), memory category labels and collectives.
//
// Note [Cheap phase calls]: the hooks run in every step (a forward, a backward, an optimizer step,
// each data-loader batch), so each of their calls here is one pybind11 crossing with integer
// arguments that records one 24-byte event: phases are unnamed ranges (the trace names them by their
// Phase, so no string is interned or even built), and a phase's memory label is set in the same
// call. Nothing here takes a lock or allocates once the thread has its ring.
//
// Enumerations travel as their integer values; phase_names() and friends give Python the tables,
// read from the event model's own name functions, so the two sides cannot disagree.
#include "bindings.hpp"

#include <memcomm/allocator/torch_allocator.hpp>
#include <memcomm/common/termination.hpp>
#include <memcomm/profiler/clock_sync.hpp>
#include <memcomm/profiler/recorder.hpp>
#include <memcomm/profiler/sink.hpp>
#include <memcomm/profiler/stream_protocol.hpp>
#include <memcomm/trace/clock.hpp>
#include <memcomm/trace/trace_error.hpp>
#include <memcomm/trace/trace_reader.hpp>
#include <memcomm/train/choices.hpp>
#include <memcomm/train/launch.hpp>
#include <memcomm/train/profiling.hpp>

#include <pybind11/stl.h>

#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace memcomm::py {

namespace pyb = pybind11;

namespace {

prof::Phase to_phase(int p) {
  if (p < 0 || p >= static_cast<int>(prof::Phase::Count)) throw std::invalid_argument("no phase " + std::to_string(p));
  return static_cast<prof::Phase>(p);
}

prof::MemCategory to_category(int c) {
  if (c < 0 || c > static_cast<int>(prof::MemCategory::Input))
    throw std::invalid_argument("no memory category " + std::to_string(c));
  return static_cast<prof::MemCategory>(c);
}

train::Cupti to_cupti(const std::string& s) {  // memcomm-train --cupti's names (train/choices.hpp)
  if (auto c = train::choice_from_string<train::Cupti>(s)) return *c;
  throw std::invalid_argument("cupti must be 'auto', 'on' or 'off', got '" + s + "'");
}

// The engine whose events the run records: the CPU one when memcomm serves CPU tensors, else the
// CUDA one of `device` if it has allocated there (engines appear lazily), else none.
alloc::CachingAllocator* observed_allocator(int device) {
  if (auto* cpu = alloc::torch_cpu_allocator()) return cpu;
#ifdef MEMCOMM_ALLOCATOR_TORCH_WITH_CUDA
  if (device >= 0) return alloc::torch_cuda_allocator(device);
#endif
  (void)device;
  return nullptr;
}

// profile(live=)'s rule is memcomm-train --live's: prof::parse_connect_endpoint. A ValueError in Python.
void check_live_address(const std::string& live) {
  try {
    (void)prof::parse_connect_endpoint(live);
  } catch (const prof::TraceError& e) {
    throw std::invalid_argument(std::string("live: ") + e.what());
  }
}

// One recording of a Python run. The recorder is process-wide, so memcomm/profiler.py lets one
// exist at a time. Every check that can fail runs before RunProfiler touches the recorder, so a
// bad argument leaves nothing behind.
class PyRunProfiler {
 public:
  PyRunProfiler(const std::string& trace, const std::string& live, int rank, int world, int local_rank,
                const std::string& cupti, bool on_gpu, int device) {
    if (trace.empty() && live.empty()) throw std::invalid_argument("profile() needs a trace file, a live address or both");
    if (world < 1 || rank < 0 || rank >= world)
      throw std::invalid_argument("rank " + std::to_string(rank) + " is outside a world of " + std::to_string(world));
    train::TrainOptions o;
    o.trace = trace;
    o.live = live;
    o.cupti = to_cupti(cupti);
    if (!live.empty()) check_live_address(live);
    train::DistEnv env;
    env.rank = rank;
    env.world = world;
    env.local_rank = local_rank;
    run_ = std::make_unique<train::RunProfiler>(o, env, observed_allocator(device), on_gpu);
  }

  train::RunProfiler& run() {
    if (!run_) throw std::runtime_error("this profiler has stopped");
    return *run_;
  }
  std::pair<int64_t, int64_t> finish() {
    if (!run_) return totals_;
    totals_ = run_->finish();
    cpu_ns_ = run_->collector_cpu_ns();
    trace_error_ = run_->trace_error();
    live_note_ = run_->live_note();
    run_.reset();  // closes the sinks: the files are complete when this returns
    return totals_;
  }
  // In a process forked while this run recorded: lets go of the parent's run without finishing it,
  // which would close the parent's files; it is leaked as it stands (Note [Recording across fork]).
  void abandon() { (void)run_.release(); }
  // Observes the allocator serving `device` now, when the run observed none at its start.
  bool observe_allocator(int device) { return run_ && run_->observe_allocator(observed_allocator(device)); }
  int64_t collector_cpu_ns() const { return run_ ? run_->collector_cpu_ns() : cpu_ns_; }
  const std::string& trace_error() const { return trace_error_; }
  const std::string& live_note() const { return live_note_; }

 private:
  std::unique_ptr<train::RunProfiler> run_;
  std::pair<int64_t, int64_t> totals_{0, 0};
  int64_t cpu_ns_ = 0;
  std::string trace_error_;
  std::string live_note_;
};

void record_collective(int op, int dtype, uint64_t bytes, int comm, uint32_t seq, int bucket, int64_t start_ns,
                       int64_t end_ns) {
  const uint16_t b = bucket < 0 ? prof::kNoBucket : static_cast<uint16_t>(bucket);
  prof::record_collective(prof::Recorder::global(), static_cast<prof::CollOp>(op), static_cast<prof::DType>(dtype),
                          bytes, static_cast<uint8_t>(comm), seq, b, start_ns, end_ns);
}

std::pair<int64_t, int64_t> clock_offset(const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>& probes) {
  std::vector<prof::ClockProbe> ps;
  for (const auto& [t0, t1, t2, t3] : probes) ps.push_back({t0, t1, t2, t3});
  const prof::ClockOffsetEstimate e = prof::estimate_clock_offset(ps);  // invalid_argument: ValueError
  return {e.offset_ns, e.error_bound_ns};
}

// Allocations per memory category in a trace file: what the labels of Note [Memory categories]
// came to, without a viewer (tests, a quick look).
pyb::dict alloc_categories(const std::string& path) {
  std::map<std::string, int64_t> counts;
  {
    pyb::gil_scoped_release release;
    prof::TraceReader reader(path);
    prof::ChunkView chunk;
    while (reader.next(chunk))
      for (const prof::Event& e : chunk)
        if (e.kind == prof::EventKind::Alloc)
          ++counts[prof::mem_category_name(static_cast<prof::MemCategory>(e.as<prof::MemBlockEvent>().category))];
  }
  pyb::dict d;
  for (const auto& [name, n] : counts) d[pyb::str(name)] = n;
  return d;
}

template <class Enum>
pyb::dict names(int count, const char* (*name)(Enum)) {
  pyb::dict d;
  for (int i = 0; i < count; ++i) d[pyb::str(name(static_cast<Enum>(i)))] = i;
  return d;
}

// Note [Cheap phase calls] for the three below.
int phase_begin(int phase, uint64_t id, int category, int64_t ts) {
  const prof::Phase p = to_phase(phase);
  const int prev = category < 0 ? -1 : static_cast<int>(train::exchange_memory_category(to_category(category)));
  prof::range_begin(prof::Recorder::global(), p, {}, id, ts);
  return prev;
}

void phase_end(int phase, uint64_t id, int restore, int64_t ts) {
  prof::range_end(prof::Recorder::global(), to_phase(phase), {}, id, ts);
  if (restore >= 0) train::exchange_memory_category(to_category(restore));
}

// A range the trace leaves open, for its readers to take as cut off (Note [A step the trace cut
// off]): its hooks (NVTX's pop) end, and no RangeEnd is recorded.
void phase_cut(int phase) {
  auto& r = prof::Recorder::global();
  if (r.enabled()) r.call_end_hooks(to_phase(phase));
}

// Closes a range another thread opened (`thread`: its thread_index()), at `ts`: Note [The step's
// last update] (python/memcomm/_profiler/hooks.py) ends a training thread's last step at stop().
// No NVTX pop: NVTX ranges belong to the thread that pushed them.
void phase_end_on(int thread, int phase, uint64_t id, int64_t ts) {
  auto& r = prof::Recorder::global();
  if (thread < 0 || thread > std::numeric_limits<uint16_t>::max())
    throw std::invalid_argument("thread must be a thread_index(), got " + std::to_string(thread));
  if (r.enabled()) r.record(prof::make_range(prof::EventKind::RangeEnd, ts, to_phase(phase), 0, id, uint16_t(thread)));
}

// Its NVTX range is pushed and popped at once: NVTX ranges are stamped when they are called.
void phase_span(int phase, uint64_t id, int64_t begin_ns, int64_t end_ns) {
  auto& r = prof::Recorder::global();
  const prof::Phase p = to_phase(phase);
  prof::range_begin(r, p, {}, id, begin_ns);
  prof::range_end(r, p, {}, id, end_ns);
}

void bind_run(pyb::module_& m) {
  pyb::class_<PyRunProfiler>(m, "RunProfiler",
                             "The C++ trainer's run recorder: .mct file per rank, live stream, allocator events")
      .def(pyb::init<const std::string&, const std::string&, int, int, int, const std::string&, bool, int>(),
           pyb::arg("trace"), pyb::arg("live"), pyb::arg("rank"), pyb::arg("world"), pyb::arg("local_rank"),
           pyb::arg("cupti"), pyb::arg("on_gpu"), pyb::arg("device"))
      .def("clock_offset", [](PyRunProfiler& p, int64_t ns) { p.run().clock_offset(ns); }, pyb::arg("ns"))
      .def("world_size", [](PyRunProfiler& p, uint32_t n) { p.run().world_size(n); }, pyb::arg("n"))
      .def("counter", [](PyRunProfiler& p, const std::string& name, double v) { p.run().counter(name.c_str(), v); },
           pyb::arg("name"), pyb::arg("value"))
      // With the GIL held: counter() from another Python thread must not run while the sinks close.
      .def("finish", &PyRunProfiler::finish,
           "Stops recording and closes the sinks; returns (events recorded, events dropped). Idempotent.")
      .def("observe_allocator", &PyRunProfiler::observe_allocator, pyb::arg("device"),
           "Observes the allocator memcomm serves `device` (-1: the CPU) with, when the run observes none yet "
           "(installed after the recording began, or a CUDA engine made at the GPU's first allocation); returns "
           "whether the run observes one now.")
      .def("collector_cpu_ns", &PyRunProfiler::collector_cpu_ns)
      .def("abandon", &PyRunProfiler::abandon,
           "In a process forked while the run recorded: lets go of the parent's run, leaving its files alone.")
      .def("trace_error", &PyRunProfiler::trace_error,
           "After finish(): why the trace file stopped short (a full disk) and how much it holds; '' when whole.")
      .def("live_note", &PyRunProfiler::live_note,
           "After finish(): how many events the live stream's viewer missed; '' when it got them all.");
}

void bind_hot_calls(pyb::module_& m) {
  m.def("phase_begin", &phase_begin, pyb::arg("phase"), pyb::arg("id"), pyb::arg("category"), pyb::arg("ts") = 0,
        "Opens a phase range on this thread (at `ts`, 0: now) and labels its allocations with `category` (-1: "
        "keeps the label); returns the label it replaced (-1 when kept).");
  m.def("phase_end", &phase_end, pyb::arg("phase"), pyb::arg("id"), pyb::arg("restore"), pyb::arg("ts") = 0,
        "Closes the phase range (at `ts`, 0: now) and puts back label `restore` (-1: keeps the label).");
  m.def("phase_cut", &phase_cut, pyb::arg("phase"),
        "Ends this thread's open phase range for its hooks (NVTX) and records no end: readers take it as cut off.");
  m.def("phase_end_on", &phase_end_on, pyb::arg("thread"), pyb::arg("phase"), pyb::arg("id"), pyb::arg("ts"),
        "Closes, at `ts`, a phase range that the thread with recorder index `thread` opened.");
  m.def("renew_recorder_in_forked_child", &prof::Recorder::renew_global_in_forked_child,
        "In a forked child: a fresh process-wide recorder in place of the parent's, so a profile can start here; "
        "False elsewhere (Note [Recording across fork]).");
  m.def("thread_index", [] { return static_cast<int>(prof::Recorder::global().thread_index()); },
        "The recorder's index of the calling thread (what its range events carry).");
  m.def("phase_span", &phase_span, pyb::arg("phase"), pyb::arg("id"), pyb::arg("begin_ns"), pyb::arg("end_ns"),
        "Records a phase range that is already over (the data-loader wait, known once the batch came).");
  m.def("exchange_category",
        [](int category) { return static_cast<int>(train::exchange_memory_category(to_category(category))); },
        pyb::arg("category"));
  m.def("check_live_address", &check_live_address, pyb::arg("live"),
        "Raises ValueError unless live is an address to connect to: HOST:PORT, [v6]:PORT or :PORT, port 1-65535.");
  m.def("recording", [] { return prof::recording(); });
  m.def("record_collective", &record_collective, pyb::arg("op"), pyb::arg("dtype"), pyb::arg("bytes"),
        pyb::arg("comm"), pyb::arg("seq"), pyb::arg("bucket"), pyb::arg("start_ns"), pyb::arg("end_ns"));
  m.def("comm_info",
        [](int comm, int size, int rank, uint64_t hash) {
          prof::Recorder::global().record_rare(prof::Event::from(prof::make_comm_info(
              prof::now_ns(), static_cast<uint8_t>(comm), static_cast<uint16_t>(size), static_cast<uint16_t>(rank), hash)));
        },
        pyb::arg("comm"), pyb::arg("size"), pyb::arg("rank"), pyb::arg("hash"));
}

// What the watch says when the deadline ended the process before the close returned.
std::string late_note(double deadline_s) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", deadline_s);
  return std::string("memcomm: SIGTERM: the trace was not closed within ") + seconds +
         " s (the program kept Python's lock); it holds what was flushed before the signal\n";
}

// The close runs on the watch's thread (Note [Closing on SIGTERM]), so it takes the GIL itself; the
// line saying why the process ends comes first, since code that keeps the GIL lets the close wait out
// its deadline. Each callable is kept for the life of the process: the watch's thread may be about to
// call it when another watch_termination() replaces it, and no Python object may be dropped at exit
// without the GIL.
bool watch_termination(const pyb::function& close, double deadline_s) {
  if (!(deadline_s > 0 && deadline_s <= 3600)) throw std::invalid_argument("deadline_s must be in (0, 3600] seconds");
  auto* kept = new pyb::function(close);
  const auto deadline = std::chrono::milliseconds(static_cast<long long>(deadline_s * 1000));
  return memcomm::watch_termination(
      [kept] {
        std::fputs("memcomm: SIGTERM: closing the trace, then ending as terminated\n", stderr);
        pyb::gil_scoped_acquire gil;
        try {
          (*kept)();
        } catch (pyb::error_already_set& e) {
          e.discard_as_unraisable("memcomm: closing the run on SIGTERM");
        }
      },
      deadline, late_note(deadline_s));
}

}  // namespace

void bind_profiler(pyb::module_& m) {
  // Note [One writer per trace file] (memcomm/trace/trace_writer.hpp): profile() picks another name.
  pyb::register_exception<prof::TraceFileBusy>(m, "TraceFileBusy", PyExc_FileExistsError);
  bind_run(m);
  bind_hot_calls(m);
  m.def("watch_termination", &watch_termination, pyb::arg("close"), pyb::arg("deadline_s"),
        "At the first SIGTERM, calls close() on a thread of its own, then ends the process by SIGTERM, within "
        "deadline_s of the signal whatever close() does; False (nothing done) when SIGTERM is not at its default "
        "(Note [Closing on SIGTERM]).");
  m.def("unwatch_termination", &memcomm::unwatch_termination, "SIGTERM's default action back, if the watch's is in place.");
  m.def("now_ns", [] { return prof::now_ns(); }, "The trace's clock (CLOCK_MONOTONIC or the calibrated TSC), ns.");
  m.def("clock_domain_id", [] { return prof::clock_domain_id(); },
        "Equal on two processes that read one clock; 0 when unknown (Note [One clock per host]).");
  m.def("estimate_clock_offset", &clock_offset, pyb::arg("probes"),
        "(offset_ns, error_bound_ns) from (t0, t1, t2, t3) round trips (Note [Clock offset from round trips]).");
  m.def(
      "launch_identity",
      [] {
        const train::DistEnv e = train::read_launch_identity();
        return std::make_tuple(e.rank, e.world, e.local_rank);
      },
      "(rank, world, local rank) that the launcher's environment names (torchrun's RANK, WORLD_SIZE, LOCAL_RANK "
      "or Slurm's, as memcomm-train reads them, or Lightning's LOCAL_RANK, NODE_RANK and WORLD_SIZE: Note "
      "[Lightning's launch environment]); (0, 1, 0) without a launcher. ValueError when they do not fit.");
  m.def("rank_trace_path", &prof::rank_trace_path, pyb::arg("base"), pyb::arg("rank"),
        "The file a rank writes for trace=`base` (NAME.rankR.mct).");
  m.def("trace_alloc_categories", &alloc_categories, pyb::arg("path"),
        "{category name: allocations} of a .mct file, read to its last complete chunk.");
  m.def("phase_names", [] { return names<prof::Phase>(static_cast<int>(prof::Phase::Count), &prof::phase_name); });
  m.def("category_names", [] {
    return names<prof::MemCategory>(static_cast<int>(prof::MemCategory::Input) + 1, &prof::mem_category_name);
  });
  m.def("coll_op_names", [] {
    auto d = names<prof::CollOp>(static_cast<int>(prof::CollOp::Scatter) + 1, &prof::coll_op_name);
    d[pyb::str(prof::coll_op_name(prof::CollOp::Unknown))] = static_cast<int>(prof::CollOp::Unknown);
    return d;
  });
  m.def("dtype_names",
        [] { return names<prof::DType>(static_cast<int>(prof::DType::F8E5M2) + 1, &prof::dtype_name); });
}

}  // namespace memcomm::py
