// memcomm._memcomm: the extension module behind the memcomm Python package (python/memcomm/).
// It only registers the binding files. C++ exceptions reach Python through pybind11's standard
// translation: std::invalid_argument becomes ValueError, any other std::exception RuntimeError, so
// no call ends the interpreter.
#include "bindings.hpp"

PYBIND11_MODULE(_memcomm, m) {
  m.doc() = "memcomm's C++ core: the caching allocator, the profiler and the tuner's search";
  m.attr("__version__") = MEMCOMM_VERSION;
  memcomm::py::bind_allocator(m);
  memcomm::py::bind_profiler(m);
  memcomm::py::bind_tuner(m);
}
