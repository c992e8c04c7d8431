#include <memcomm/train/profiling.hpp>

#include <fmt/format.h>

#include <memcomm/allocator/caching_allocator.hpp>
#include <memcomm/profiler/recorder.hpp>
#include <memcomm/profiler/sink.hpp>
#include <memcomm/profiler/stream_sink.hpp>
#ifdef MEMCOMM_HAVE_NVTX
#include <memcomm/profiler/nvtx_bridge.hpp>
#endif
#ifdef MEMCOMM_HAVE_CUPTI
#include <memcomm/profiler/cupti_capture.hpp>
#endif

#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace memcomm::train {

namespace {

prof::CollOp to_trace_op(const std::string& op) {
  if (op == "allreduce") return prof::CollOp::AllReduce;
  if (op == "broadcast") return prof::CollOp::Broadcast;
  if (op == "barrier") return prof::CollOp::Barrier;
  return prof::CollOp::Unknown;
}

prof::DType to_trace_dtype(const std::string& dtype) {
  if (dtype == "f32") return prof::DType::F32;
  if (dtype == "f64") return prof::DType::F64;
  if (dtype == "bf16") return prof::DType::BF16;
  if (dtype == "f16") return prof::DType::F16;
  if (dtype == "i64") return prof::DType::I64;
  if (dtype == "i32") return prof::DType::I32;
  if (dtype == "u8") return prof::DType::U8;
  if (dtype == "i8") return prof::DType::I8;
  return prof::DType::Unknown;
}

// Note [Memory categories]: what the running code is allocating for, per thread (the allocator
// calls its observers on the allocating thread). MemoryCategoryScope sets it where the trainer
// knows: parameters while the model is built, gradients while buckets are (re)built, inputs in the
// loader, activations in forward and backward (autograd's intermediate gradients have the shapes
// of activations), optimizer state in the optimizer step (its state is created at the first one),
// communication buffers around collectives. Allocations on LibTorch's intra-op threads
// (--threads > 1) and anything outside a scope stay Unknown.
thread_local uint8_t t_category = 0;

}  // namespace

MemoryCategoryScope::MemoryCategoryScope(prof::MemCategory c) noexcept : saved_(t_category) {
  t_category = static_cast<uint8_t>(c);
}

MemoryCategoryScope::~MemoryCategoryScope() { t_category = saved_; }

std::string attempt_trace_file(const std::string& trace, const DistEnv& env, int rank) {
  if (env.attempt == 0) return prof::rank_trace_path(trace, rank);
  const std::filesystem::path p(trace);
  const std::string restart = ".restart" + std::to_string(env.attempt);
  return prof::rank_trace_path((p.parent_path() / (p.stem().string() + restart + p.extension().string())).string(), rank);
}

prof::MemCategory exchange_memory_category(prof::MemCategory c) noexcept {
  return static_cast<prof::MemCategory>(std::exchange(t_category, static_cast<uint8_t>(c)));
}

struct RunProfiler::Impl {
  // Copies each allocator event into the run's recorder's ring: lock-free, no allocation (the
  // allocator may call it with its lock held). The run's own recorder, not whichever is global: in a
  // forked child that profiles anew, the parent's tap, still on the allocator it inherited, records
  // into the parent's inert recorder (Note [Recording across fork] in recorder.cpp).
  class AllocatorTap final : public alloc::Observer {
   public:
    explicit AllocatorTap(prof::Recorder& rec) : rec_(rec) {}
    void on_event(const alloc::AllocEvent& e) noexcept override {
      const uint8_t dev = e.device < 0 ? prof::kHostDevice : static_cast<uint8_t>(e.device);
      const auto ts = static_cast<int64_t>(e.time_ns);
      if (e.kind == prof::EventKind::Oom) {
        prof::OomEvent o{};
        o.ts = ts;
        o.kind = prof::EventKind::Oom;
        o.device = dev;
        o.requested = e.size;
        rec_.record(o);
        return;
      }
      // Only allocations carry a category; the viewer finds a free's category by address.
      const auto cat = e.kind == prof::EventKind::Alloc ? static_cast<prof::MemCategory>(t_category)
                                                       : prof::MemCategory::Unknown;
      auto b = prof::make_mem_block(e.kind, ts, e.address, e.size, dev,
                                    static_cast<uint8_t>(e.stream), cat);
      if (e.flags & prof::kSegmentVirtualRange) b.category = prof::kSegmentVirtualRange;
      rec_.record(b);
    }

   private:
    prof::Recorder& rec_;
  };

  prof::Recorder& rec = prof::Recorder::global();
  alloc::CachingAllocator* allocator = nullptr;
  AllocatorTap tap{rec};
  std::shared_ptr<prof::FileSink> file;
  std::shared_ptr<prof::StreamSink> live;
  int sampler = -1;
  std::mutex names_mu;
  std::map<std::string, prof::Name> names;
  bool finished = false;
  std::string trace_error;  // RunProfiler::trace_error()
  std::string live_note;    // RunProfiler::live_note()
  std::pair<int64_t, int64_t> totals{0, 0};
  int64_t collector_cpu_ns = 0;  // captured by finish()
#ifdef MEMCOMM_HAVE_CUPTI
  std::unique_ptr<prof::CuptiCapture> cupti;  // running GPU activity capture, null when off
#endif
};

namespace {

// Note [CUPTI in a run]: with --cupti auto the capture runs when the run trains on a GPU and records;
// "on" also tries on the CPU-only machine (and says why it cannot). It starts right after the
// recorder and before the first phase, since NVTX decides at its first call whether to load CUPTI
// (Note [NVTX injection] in cupti_capture.cpp). Driver memory records stay on: on a GPU the tensors
// live in PyTorch's CUDA allocator, which memcomm's observers do not see, so cudaMalloc/cudaFree
// records are the trace's only view of reserved GPU memory. An unavailable CUPTI (another client such
// as Nsight Systems) costs one warning line; host events go on.
void start_cupti(RunProfiler::Impl& impl, const TrainOptions& o, bool on_gpu) {
  if (o.cupti == Cupti::Off || (o.cupti == Cupti::Auto && !on_gpu)) return;
#ifdef MEMCOMM_HAVE_CUPTI
  impl.cupti = std::make_unique<prof::CuptiCapture>();
  if (!impl.cupti->start(impl.rec)) impl.cupti.reset();  // it printed why; host events go on
#else
  (void)impl;
  std::fprintf(stderr, "memcomm: CUPTI capture unavailable: this build has no CUPTI (built without CUDA); "
                       "recording host events only\n");
#endif
}

// The allocator's statistics every 50 ms, and its cap once (what the advisor measures headroom
// against; it never changes). The run observes this allocator from now on.
void sample_allocator(RunProfiler::Impl& impl, alloc::CachingAllocator* allocator) {
  impl.allocator = allocator;
  impl.sampler = impl.rec.add_sampler(
      [allocator](prof::Recorder& r) {
        const auto st = allocator->stats();
        const auto sum = allocator->memory_summary();
        const int64_t t = prof::now_ns();
        const uint8_t dev = prof::kHostDevice;
        r.record(prof::make_mem_sample(t, prof::MemMetric::Allocated, uint64_t(st.allocated_bytes.current), dev));
        r.record(prof::make_mem_sample(t, prof::MemMetric::Reserved, uint64_t(st.reserved_bytes.current), dev));
        r.record(prof::make_mem_sample(t, prof::MemMetric::Active, uint64_t(st.active_bytes.current), dev));
        r.record(prof::make_mem_sample(t, prof::MemMetric::InactiveSplit, uint64_t(st.inactive_split_bytes.current),
                                       dev));
        r.record(prof::make_mem_sample(t, prof::MemMetric::LargestFree, sum.largest_free_block, dev));
        r.record(prof::make_mem_sample(t, prof::MemMetric::Fragmentation,
                                       uint64_t(sum.external_fragmentation() * 1e6), dev));
      },
      std::chrono::milliseconds(50));
  if (allocator->config().capacity > 0)
    impl.rec.record_rare(prof::Event::from(prof::make_mem_sample(prof::now_ns(), prof::MemMetric::DeviceTotal,
                                                                 allocator->config().capacity, prof::kHostDevice)));
}

}  // namespace

RunProfiler::RunProfiler(const TrainOptions& o, const DistEnv& env, alloc::CachingAllocator* allocator,
                         bool on_gpu) {
  if (o.trace.empty() && o.live.empty()) return;
  impl_ = std::make_unique<Impl>();
  auto& rec = impl_->rec;
  prof::Identity id;
  id.rank = env.rank;
  id.world_size = env.world;
  id.local_rank = env.local_rank;
  rec.set_identity(id);
  if (!o.trace.empty()) {
    prof::WriterOptions w;
    w.rank = static_cast<uint32_t>(env.rank);
    w.world_size = static_cast<uint32_t>(env.world);
    // Compressed on the collector thread itself (no compression thread): a rank records a few
    // thousand events a second, so a chunk takes microseconds, and one background thread per
    // rank instead of two means fewer wake-ups competing with training for the cores
    // (Note [Collector cadence] in recorder.cpp).
    impl_->file = std::make_shared<prof::FileSink>(attempt_trace_file(o.trace, env, env.rank), w, size_t(1) << 16,
                                                   /*compress_threads=*/0);
    rec.add_sink(impl_->file);
  }
  if (!o.live.empty()) {
    prof::StreamOptions s;
    s.endpoint = prof::parse_connect_endpoint(o.live);
    s.rank = static_cast<uint32_t>(env.rank);
    s.world_size = static_cast<uint32_t>(env.world);
    impl_->live = std::make_shared<prof::StreamSink>(s);
    rec.add_sink(impl_->live);
  }
#ifdef MEMCOMM_HAVE_NVTX
  prof::install_nvtx_bridge(rec);
#endif
  if (allocator) sample_allocator(*impl_, allocator);
  rec.start();
  // After start: events recorded before it are dropped, and the allocator's state at this moment is
  // the first thing the tap sends (Note [An observer added mid-run] in caching_allocator.cpp).
  if (allocator) allocator->add_observer(&impl_->tap, /*with_state=*/true);
  start_cupti(*impl_, o, on_gpu);
}

bool RunProfiler::observe_allocator(alloc::CachingAllocator* allocator) {
  if (!impl_ || impl_->finished) return false;
  if (impl_->allocator || !allocator) return impl_->allocator != nullptr;
  sample_allocator(*impl_, allocator);
  allocator->add_observer(&impl_->tap, /*with_state=*/true);  // its state now, then its events
  return true;
}

RunProfiler::~RunProfiler() { finish(); }

void RunProfiler::collective(const CollectiveRecord& r) {
  if (!impl_) return;
  const auto op = to_trace_op(r.op);
  const auto dt = to_trace_dtype(r.dtype);
  const uint16_t bucket = r.bucket < 0 ? prof::kNoBucket : static_cast<uint16_t>(r.bucket);
  prof::record_collective(impl_->rec, op, dt, uint64_t(r.bytes), 0, static_cast<uint32_t>(r.seq), bucket, r.start_ns,
                          r.end_ns);
}

void RunProfiler::clock_offset(int64_t ns) {
  if (!impl_) return;
  impl_->rec.record_rare(prof::Event::from(prof::make_meta(prof::now_ns(), prof::MetaKey::ClockOffset, ns)));
}

void RunProfiler::world_size(uint32_t n) {
  if (!impl_) return;
  impl_->rec.record_rare(prof::Event::from(prof::make_meta(prof::now_ns(), prof::MetaKey::WorldSize, n)));
}

void RunProfiler::counter(const char* name, double value) {
  if (!impl_) return;
  prof::Name n;
  {
    std::lock_guard<std::mutex> lk(impl_->names_mu);
    auto it = impl_->names.find(name);
    if (it == impl_->names.end()) it = impl_->names.emplace(name, impl_->rec.name(name)).first;
    n = it->second;
  }
  prof::record_counter(impl_->rec, n, value);
}

namespace {
// What a live stream's viewer missed, for RunProfiler::live_note(); "" when it got every event.
// Without a trace file the events it missed are lost, and counted with the run's drops.
std::string missed_by_viewer(const prof::StreamStats& s, bool file) {
  if (s.dropped_events == 0) return "";
  const std::string last = s.last_error.empty() ? "" : " (last: " + s.last_error + ")";
  if (s.connects == 0)
    return fmt::format("live stream: no viewer connected{}: its {} events {}", last, s.dropped_events,
                       file ? "are in the trace file only" : "are lost (no trace file was asked for)");
  return fmt::format("live stream: the viewer missed {} of {} events (while none was connected, or it fell behind){}; "
                     "{}", s.dropped_events, s.sent_events + s.dropped_events, last,
                     file ? "the trace file has them all" : "they are lost (no trace file was asked for)");
}
}  // namespace

std::pair<int64_t, int64_t> RunProfiler::finish() {
  if (!impl_ || impl_->finished) return impl_ ? impl_->totals : std::pair<int64_t, int64_t>{0, 0};
  auto& rec = impl_->rec;
#ifdef MEMCOMM_HAVE_CUPTI
  if (impl_->cupti) {
    impl_->cupti->stop();  // Note [CUPTI teardown]: flushes into the still-running recorder
    const prof::CuptiStats cs = impl_->cupti->stats();
    if (cs.cupti_dropped > 0 || cs.buffers_denied > 0)
      std::fprintf(stderr, "memcomm: CUPTI dropped %llu GPU activity record(s) (%llu buffer request(s) refused)\n",
                   static_cast<unsigned long long>(cs.cupti_dropped), static_cast<unsigned long long>(cs.buffers_denied));
    impl_->cupti.reset();
  }
#endif
  if (impl_->allocator) {
    rec.remove_sampler(impl_->sampler);
    impl_->allocator->remove_observer(&impl_->tap);
  }
  rec.stop();
#ifdef MEMCOMM_HAVE_NVTX
  prof::uninstall_nvtx_bridge(rec);
#endif
  const auto st = rec.stats();
  uint64_t lost = 0;
  if (impl_->file) {
    rec.remove_sink(impl_->file);
    const prof::FileSink& f = *impl_->file;
    if (!f.error().empty()) {
      lost = f.events_lost();
      impl_->trace_error = f.removed() ? f.error()
                                       : fmt::format("trace {}: {}; the file holds the first {} events ({} lost), "
                                                     "readable up to its last complete chunk", f.path(), f.error(),
                                                     f.events_written(), lost);
    }
  }
  if (impl_->live) {
    rec.remove_sink(impl_->live);  // closes it, giving a viewer still there a second for the last events
    const prof::StreamStats ls = impl_->live->stats();
    impl_->live_note = missed_by_viewer(ls, impl_->file != nullptr);
    if (!impl_->file) lost += ls.dropped_events;
  }
  impl_->totals = {int64_t(st.recorded), int64_t(st.dropped + lost)};
  impl_->collector_cpu_ns = int64_t(st.collector_cpu_ns);
  impl_->finished = true;
  return impl_->totals;
}

std::string RunProfiler::trace_error() const { return impl_ ? impl_->trace_error : std::string(); }

std::string RunProfiler::live_note() const { return impl_ ? impl_->live_note : std::string(); }

std::string RunProfiler::live_note_now() const {
  if (!impl_ || !impl_->live) return "";
  prof::StreamStats s = impl_->live->stats();
  s.dropped_events += s.queued_events;  // the process ends before they are sent
  return missed_by_viewer(s, impl_->file != nullptr);
}

int64_t RunProfiler::collector_cpu_ns() const {
  if (!impl_) return 0;
  return impl_->finished ? impl_->collector_cpu_ns : int64_t(impl_->rec.stats().collector_cpu_ns);
}

}  // namespace memcomm::train
