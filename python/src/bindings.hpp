// The binding files of memcomm._memcomm, one per library; module.cpp calls each once.
// Note [No LibTorch in the bindings] (python/CMakeLists.txt): they take and return plain values.
#pragma once

#include <pybind11/pybind11.h>

namespace memcomm::py {

void bind_allocator(pybind11::module_& m);  // bind_allocator.cpp: install, stats, cache, snapshot
void bind_profiler(pybind11::module_& m);   // bind_profiler.cpp: run recorder, phases, collectives, clocks
void bind_tuner(pybind11::module_& m);      // bind_tuner.cpp: the search and verification over Python probes

}  // namespace memcomm::py
