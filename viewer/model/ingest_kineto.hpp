// torch.profiler (Kineto) traces into the viewer model (Note [Reader seams] in loader.cpp).
//
// The trace layer's read_kineto() turns one file into one rank's memcomm events (Note [Kineto
// events as memcomm events] in memcomm/trace/kineto.hpp); they are sorted by time, as TraceSet
// sorts them, and go through TraceIngest like an .mct file's chunks. So every view shows them as it
// shows .mct traces: host threads' ranges and launches on per-thread lanes, GPU annotations on
// theirs, kernels per stream, NCCL kernels as collectives (matched across the files of a run by
// Timeline::merge), ProfilerStep#N as steps, [memory] events as block events and samples.
// A Kineto file carries no clock offsets (one origin for every file: Note [One origin for every
// torch.profiler trace] in trace/src/kineto/converter.hpp) and no allocator segments, so there is
// nothing to preset, and reserved memory is the samples' "Total Reserved".
#pragma once

#include <memcomm/view/loader.hpp>

#include <atomic>
#include <string>

namespace memcomm::view {

bool ingest_kineto(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress,
                   const LoadOptions& options = {});

}  // namespace memcomm::view
