# memcomm-replay's .mct input: read_mct_trace (replay/mct_trace.cpp, private to memcomm_replay, so
# its folder is on the include path) -> RequestBuilder -> checked replay.
# Seeds: tests/fuzz/corpus/replay_mct_fuzz/ (small traces with allocator events and steps).
memcomm_fuzz_target(replay_mct_fuzz
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/replay/fuzz_mct_requests.cpp
  LIBS memcomm_replay memcomm_snapshot)
target_include_directories(replay_mct_fuzz PRIVATE ${PROJECT_SOURCE_DIR}/replay)
# memcomm-replay's torch.profiler input: read_kineto_trace (replay/kineto_trace.cpp, private likewise)
# -> requests from [memory] events -> checked replay. Seeds: the Kineto readers' (scripts/fuzz.sh).
memcomm_fuzz_target(replay_kineto_fuzz
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/replay/fuzz_kineto_requests.cpp
  LIBS memcomm_replay memcomm_snapshot)
target_include_directories(replay_kineto_fuzz PRIVATE ${PROJECT_SOURCE_DIR}/replay)
