# memcomm-view's file inputs through its model library (viewer/model, no GLFW or ImGui): .mct
# traces (ingest_trace + alloc_derive + allocator_state), PyTorch snapshots (ingest_snapshot) and
# torch.profiler traces, JSON or gzip (ingest_kineto), and live mode's session past the stream decoder
# (LiveSession fed by prof::ConnectionDecoder).
# The fuzz configuration has the viewer off (no window system needed): the model library alone is
# added here. Seeds: tests/fuzz/corpus/viewer_{mct,snapshot}_ingest_fuzz/, the Kineto readers' and the
# stream decoder's (scripts/fuzz.sh).
if(NOT TARGET memcomm_view_model)
  add_subdirectory(${PROJECT_SOURCE_DIR}/viewer/model ${PROJECT_BINARY_DIR}/fuzz_viewer_model)  # not in fuzz/: scripts/fuzz.sh runs all there
endif()
memcomm_fuzz_target(viewer_mct_ingest_fuzz
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/viewer/fuzz_mct_ingest.cpp
  LIBS memcomm_view_model)
memcomm_fuzz_target(viewer_snapshot_ingest_fuzz
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/viewer/fuzz_snapshot_ingest.cpp
  LIBS memcomm_view_model)
memcomm_fuzz_target(viewer_live_session_fuzz
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/viewer/fuzz_live_session.cpp
  LIBS memcomm_view_model)
memcomm_fuzz_target(viewer_kineto_ingest_fuzz
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/viewer/fuzz_kineto_ingest.cpp
  LIBS memcomm_view_model)
# ingest_trace.hpp / ingest_snapshot.hpp / ingest_kineto.hpp are private to the model library.
target_include_directories(viewer_mct_ingest_fuzz PRIVATE ${PROJECT_SOURCE_DIR}/viewer/model)
target_include_directories(viewer_snapshot_ingest_fuzz PRIVATE ${PROJECT_SOURCE_DIR}/viewer/model)
target_include_directories(viewer_kineto_ingest_fuzz PRIVATE ${PROJECT_SOURCE_DIR}/viewer/model)
