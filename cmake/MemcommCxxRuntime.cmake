# Note [One C++ runtime beside LibTorch]
# LibTorch's libraries load the shared libstdc++.so.6. A g++ whose own libstdc++ exists only as an
# archive (a compiler installed beside the system's, under /opt, is one) copies that runtime into
# every program and shared object it links, so a process that also loads torch holds two C++
# runtimes, each with its own locale facets. The first number that code of one streams into a
# stream the other set up then crashes: on the GPU machine, memcomm's Python module segfaulted
# formatting the message of torch's OutOfMemoryError, in the middle of memcomm.tune's probes.
#
# So a short probe links a shared object the way every target will be linked, and when it carries
# no libstdc++ dependency, C++ links take the system's libstdc++.so.6 (the one LibTorch loads): with
# -nostdlib++ and the library last on the line where the compiler has that flag (g++ 13, clang),
# else through a libstdc++.so link in a folder searched before the compiler's own. The probe is then
# linked again the new way, to tell whether it worked. nvcc's links are left alone (nvcc takes no
# -nostdlib++); memcomm's CUDA-linked programs do not load LibTorch.

# Links probe.cpp into a shared object, `ARGN` last, and sets `out` to whether the result depends on a
# shared C++ runtime; unset when it does not link (the build's own links will then say why).
function(memcomm_probe_shared_cxx_runtime out)
  set(dir ${PROJECT_BINARY_DIR}/CMakeFiles/memcomm-cxx-runtime)
  file(WRITE ${dir}/probe.cpp
       "#include <sstream>\n#include <string>\nstd::string probe(int v) { std::ostringstream s; s << v; return s.str(); }\n")
  file(REMOVE ${dir}/probe.so)
  separate_arguments(flags UNIX_COMMAND "${CMAKE_CXX_FLAGS} ${CMAKE_SHARED_LINKER_FLAGS}")
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} ${flags} -shared -fPIC probe.cpp -o probe.so ${ARGN}
                  WORKING_DIRECTORY ${dir} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  unset(${out} PARENT_SCOPE)
  if(rc EQUAL 0)
    file(STRINGS ${dir}/probe.so needed REGEX "lib(std)?c\\+\\+\\.so")
    if(needed)
      set(${out} ON PARENT_SCOPE)
    else()
      set(${out} OFF PARENT_SCOPE)
    endif()
  endif()
endfunction()

memcomm_probe_shared_cxx_runtime(shared_runtime)
if(DEFINED shared_runtime AND NOT shared_runtime)
  find_library(MEMCOMM_SHARED_LIBSTDCXX NAMES libstdc++.so.6 NO_CMAKE_PATH NO_CMAKE_ENVIRONMENT_PATH)
  include(CheckLinkerFlag)
  check_linker_flag(CXX -nostdlib++ MEMCOMM_LINKER_HAS_NOSTDLIBXX)
  set(how "")
  if(MEMCOMM_SHARED_LIBSTDCXX AND MEMCOMM_LINKER_HAS_NOSTDLIBXX)
    memcomm_probe_shared_cxx_runtime(shared_runtime -nostdlib++ ${MEMCOMM_SHARED_LIBSTDCXX})
    if(shared_runtime)
      add_link_options($<$<LINK_LANGUAGE:CXX>:-nostdlib++>)
      string(APPEND CMAKE_CXX_STANDARD_LIBRARIES " ${MEMCOMM_SHARED_LIBSTDCXX} -lm")  # g++ adds -lm with -lstdc++
      set(how "-nostdlib++ and ${MEMCOMM_SHARED_LIBSTDCXX}")
    endif()
  endif()
  if(MEMCOMM_SHARED_LIBSTDCXX AND NOT how)
    set(dir ${PROJECT_BINARY_DIR}/CMakeFiles/memcomm-cxx-runtime/lib)
    file(MAKE_DIRECTORY ${dir})
    file(CREATE_LINK ${MEMCOMM_SHARED_LIBSTDCXX} ${dir}/libstdc++.so SYMBOLIC)
    memcomm_probe_shared_cxx_runtime(shared_runtime -L${dir})
    if(shared_runtime)
      add_link_options(-L${dir})
      set(how "${MEMCOMM_SHARED_LIBSTDCXX} found first")
    endif()
  endif()
  if(how)
    message(STATUS "${CMAKE_CXX_COMPILER} links libstdc++ statically; C++ links use ${how} "
                   "(Note [One C++ runtime beside LibTorch])")
  else()
    message(WARNING "${CMAKE_CXX_COMPILER} links its C++ runtime statically and could not be made to link "
                    "libstdc++.so.6: programs and the Python module that load LibTorch will hold two C++ "
                    "runtimes and may crash (Note [One C++ runtime beside LibTorch]); use a compiler with a "
                    "shared runtime")
  endif()
endif()
