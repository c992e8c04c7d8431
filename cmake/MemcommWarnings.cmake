# Warnings, sanitizers and fuzzing flags shared by every memcomm target.

# memcomm_warnings(<target>): -Wall -Wextra (and clang's -Wthread-safety) for our own code (and -Werror in CI).
function(memcomm_warnings target)
  set(flags -Wall -Wextra -Wno-unused-parameter)
  # Clang checks the allocator's lock annotations (Note [Annotated lock rules] in
  # allocator/core/thread_annotations.hpp); GCC has no such analysis and the macros expand to nothing.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    list(APPEND flags -Wthread-safety)
  endif()
  if(MEMCOMM_WERROR)
    list(APPEND flags -Werror)
  endif()
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CXX>:${flags}>"
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>")
endfunction()

# Note [Checked builds]
# The sanitizer and fuzz builds of scripts/test.sh use CMAKE_BUILD_TYPE=Check: -O1 with line tables
# only (-g1). A sanitizer report needs file:line for each frame, which line tables give; it does not
# need variable locations or types, which are most of what -g costs. -O1 is what ASan, TSan and
# libFuzzer recommend, and keeps inlining from hiding frames. One translation unit
# (trace/src/analysis.cpp, ASan+UBSan, g++ 12) took 33 s of CPU at RelWithDebInfo (-O2 -g) and 10 s
# at -O1 -g1. NDEBUG stays defined, as in the Release build the tests were written against.
# Catch2's prebuilt main (tests/CMakeLists.txt), the slowest file of these builds and not our code,
# compiles at -O0 there, sanitizers still on.
# The ASan+UBSan unit tests and the fuzz targets share one clang tree (build-asan-fuzz/): with
# MEMCOMM_FUZZ=ON every target also gets libFuzzer's coverage instrumentation
# (-fsanitize=fuzzer-no-link), only the fuzz executables link libFuzzer's main, and a test executable
# takes the coverage callbacks' no-op defaults from the sanitizer runtime. The libraries then compile
# once for both instead of once with g++ (tests) and once with clang (fuzz); clang with ASan, UBSan
# and coverage took about the CPU time of g++ with ASan and UBSan alone on the same library files.
# (Plain variables: project() has already made these cache entries, empty, for an unknown build type.)
set(CMAKE_C_FLAGS_CHECK "-O1 -g1 -DNDEBUG")
set(CMAKE_CXX_FLAGS_CHECK "-O1 -g1 -DNDEBUG")

if(MEMCOMM_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MEMCOMM_FUZZ=ON needs clang: configure with -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  # The fuzz targets run under ASan+UBSan: that is the default, and the only sanitizers allowed beside them.
  if(NOT MEMCOMM_SANITIZE)
    set(MEMCOMM_SANITIZE address,undefined)
  elseif(NOT MEMCOMM_SANITIZE MATCHES "address")
    message(FATAL_ERROR "MEMCOMM_FUZZ=ON runs under ASan: MEMCOMM_SANITIZE='${MEMCOMM_SANITIZE}' lacks address")
  endif()
  # Every library gets coverage instrumentation; only fuzz executables link the libFuzzer main. Test
  # executables link the coverage callbacks' no-op defaults from the sanitizer runtime.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

if(MEMCOMM_SANITIZE)
  add_compile_options(-fsanitize=${MEMCOMM_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${MEMCOMM_SANITIZE})
endif()

# ccache speeds up the idempotent rebuilds that scripts/test.sh and scripts/demo.sh do.
find_program(MEMCOMM_CCACHE ccache)
if(MEMCOMM_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_C_COMPILER_LAUNCHER ${MEMCOMM_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${MEMCOMM_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${MEMCOMM_CCACHE})
endif()

# memcomm_export_library(<target> <export-name> <include-dir>): installable library memcomm::<export-name>.
function(memcomm_export_library target export_name include_dir)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  add_library(memcomm::${export_name} ALIAS ${target})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${include_dir}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  install(DIRECTORY ${include_dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  set_property(GLOBAL APPEND PROPERTY MEMCOMM_EXPORTED_TARGETS ${target})
endfunction()

# memcomm_tool(<target> sources...): a command-line tool that lands in build/bin and gets installed.
function(memcomm_tool target)
  add_executable(${target} ${ARGN})
  memcomm_warnings(${target})
  set_property(GLOBAL APPEND PROPERTY MEMCOMM_TOOLS ${target})
endfunction()
