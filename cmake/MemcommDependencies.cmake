# Finds every third-party dependency once, so the parts only link targets.
# All of them come from Debian packages or from torch's PyPI wheel; nothing is vendored.

find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
# The torch.profiler reader (trace/src/kineto/): simdjson parses each event, zlib inflates .json.gz.
# RE2 matches the communication-kernel pattern of every kernel reader (Note [A pattern the user writes]).
find_package(simdjson REQUIRED)
find_package(ZLIB REQUIRED)
pkg_check_modules(MEMCOMM_RE2 REQUIRED IMPORTED_TARGET re2)

if(MEMCOMM_WITH_TESTS)
  find_package(Catch2 2 REQUIRED)
  include(Catch)
endif()
if(MEMCOMM_WITH_BENCH)
  find_package(benchmark REQUIRED)
endif()

# --- CUDA toolkit (compiled always when present; GPUs are detected at run time) ---
set(MEMCOMM_HAVE_CUDA OFF)
if(NOT MEMCOMM_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Note [No native arch]: "native" fails on machines without a GPU; 90 gives sm_90 SASS plus PTX.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(MEMCOMM_HAVE_CUDA ON)
    # NCCL ships no CMake package.
    find_path(MEMCOMM_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(MEMCOMM_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
    if(MEMCOMM_NCCL_INCLUDE_DIR AND MEMCOMM_NCCL_LIBRARY)
      add_library(memcomm_nccl INTERFACE)
      target_include_directories(memcomm_nccl SYSTEM INTERFACE ${MEMCOMM_NCCL_INCLUDE_DIR})
      target_link_libraries(memcomm_nccl INTERFACE ${MEMCOMM_NCCL_LIBRARY})
    endif()
  elseif(MEMCOMM_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MEMCOMM_WITH_CUDA=ON but no CUDA compiler was found (put nvcc on PATH)")
  endif()
endif()

# --- LibTorch from the project's virtualenv (or -DTorch_DIR=/path/to/libtorch/share/cmake/Torch) ---
if(MEMCOMM_WITH_TORCH)
  if(NOT DEFINED Torch_DIR)
    set(_venv_python ${PROJECT_SOURCE_DIR}/.venv/bin/python)
    if(DEFINED SKBUILD AND DEFINED Python3_EXECUTABLE)
      # `pip install .`: the torch of the environment being installed into.
      set(MEMCOMM_PYTHON ${Python3_EXECUTABLE} CACHE FILEPATH "Python with torch installed")
    elseif(EXISTS ${_venv_python})
      set(MEMCOMM_PYTHON ${_venv_python} CACHE FILEPATH "Python with torch installed")
    else()
      find_program(MEMCOMM_PYTHON NAMES python3 python)
    endif()
    execute_process(
      COMMAND ${MEMCOMM_PYTHON} -c "import torch; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _torch_rc ERROR_QUIET)
    if(NOT _torch_rc EQUAL 0)
      message(FATAL_ERROR "LibTorch not found: '${MEMCOMM_PYTHON} -c \"import torch\"' failed. "
                          "Run scripts/setup.sh, pass -DTorch_DIR=..., or configure with -DMEMCOMM_WITH_TORCH=OFF.")
    endif()
    list(APPEND CMAKE_PREFIX_PATH ${_torch_prefix})
  endif()
  # Note [Torch rewrites CUDA flags]: Torch's CMake config appends -gencode flags for every
  # architecture it was built for (including ones nvcc 13 rejects) to CMAKE_CUDA_FLAGS. Our CUDA
  # code follows CMAKE_CUDA_ARCHITECTURES instead, so keep our flags as they were.
  set(_cuda_flags_before_torch "${CMAKE_CUDA_FLAGS}")
  if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
  endif()
  find_package(Torch REQUIRED)
  set(CMAKE_CUDA_FLAGS "${_cuda_flags_before_torch}")
  # Torch's imported target carries its flags (ABI define, include dirs); keep them out of our warnings.
  add_library(memcomm_torch INTERFACE)
  target_link_libraries(memcomm_torch INTERFACE ${TORCH_LIBRARIES})
  get_filename_component(MEMCOMM_TORCH_LIB_DIR ${TORCH_LIBRARY} DIRECTORY)
endif()

# --- Viewer: Dear ImGui 1.86 (static lib holds the GLFW + OpenGL3 backends), GLFW, OpenGL, stb ---
if(MEMCOMM_WITH_VIEWER OR MEMCOMM_WITH_TESTS)
  find_package(glfw3 QUIET)
  find_package(OpenGL QUIET)
  pkg_check_modules(IMGUI QUIET IMPORTED_TARGET imgui)
  if(glfw3_FOUND AND OPENGL_FOUND AND IMGUI_FOUND)
    set(MEMCOMM_HAVE_GUI ON)
    add_library(memcomm_gui INTERFACE)
    # stb is a dependency of libimgui.a (Requires: stb), so PkgConfig::IMGUI brings libstb too.
    target_link_libraries(memcomm_gui INTERFACE PkgConfig::IMGUI glfw OpenGL::GL ${CMAKE_DL_LIBS})
  elseif(MEMCOMM_WITH_VIEWER)
    message(FATAL_ERROR "The viewer needs libimgui-dev, libglfw3-dev and OpenGL (scripts/setup.sh installs them), "
                        "or configure with -DMEMCOMM_WITH_VIEWER=OFF")
  endif()
endif()
