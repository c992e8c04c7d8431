# The tuner's parser of outside input: its cache files (JSON written by an earlier run).
memcomm_fuzz_target(tuner_cache_fuzz SOURCES ${CMAKE_CURRENT_LIST_DIR}/tuner/fuzz_tune_cache.cpp LIBS memcomm_tuner_core)
