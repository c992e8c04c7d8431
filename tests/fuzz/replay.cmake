# Fuzzing memcomm-replay's input path: pickle reader + snapshot model + request rebuilding + replay.
# Seeds: tests/fuzz/corpus/fuzz_snapshot_pickle/ (small slices of the shared snapshots, re-pickled, and
# CPython protocol 2/5 pickles); scripts may add ../shared/traces/pytorch-snapshots as a second corpus dir.
memcomm_fuzz_target(fuzz_snapshot_pickle
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/replay_fuzz.cpp
  LIBS memcomm_replay memcomm_snapshot)
