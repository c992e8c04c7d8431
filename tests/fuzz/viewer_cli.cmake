# memcomm-view's text inputs (--script files, --range, --panes, the advice JSON of memcomm-trace), the
# shared CLI parsers (parse_size, parse_endpoint) and memcomm-trace memory's --at. input_script.cpp,
# panes.cpp and advice.cpp need no window system, so they are compiled in here rather than linking memcomm_view_app (ImGui + GLFW), which the fuzz
# configuration does not build. GLFW's header is only read for its key codes.
# Seeds: tests/fuzz/corpus/viewer_cli_fuzz/ (first byte picks the parser).
if(NOT TARGET memcomm_view_model)
  add_subdirectory(${PROJECT_SOURCE_DIR}/viewer/model ${PROJECT_BINARY_DIR}/fuzz_viewer_model)  # not in fuzz/: scripts/fuzz.sh runs all there
endif()
find_path(MEMCOMM_FUZZ_GLFW_INCLUDE GLFW/glfw3.h)
if(MEMCOMM_FUZZ_GLFW_INCLUDE)
  memcomm_fuzz_target(viewer_cli_fuzz
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/viewer/fuzz_cli_text.cpp
            ${PROJECT_SOURCE_DIR}/viewer/app/input_script.cpp
            ${PROJECT_SOURCE_DIR}/viewer/app/panes.cpp
            ${PROJECT_SOURCE_DIR}/viewer/app/advice.cpp
    LIBS memcomm_view_model memcomm_profiler memcomm_snapshot memcomm_common)
  target_include_directories(viewer_cli_fuzz PRIVATE ${PROJECT_SOURCE_DIR}/viewer/app/include ${MEMCOMM_FUZZ_GLFW_INCLUDE})
endif()
