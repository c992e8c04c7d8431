# Profiler parsers of outside input: the .mct file reader and the live stream decoder.
set(_pf ${CMAKE_CURRENT_LIST_DIR}/profiler)
memcomm_fuzz_target(profiler_trace_reader_fuzz SOURCES ${_pf}/fuzz_trace_reader.cpp LIBS memcomm_trace)
memcomm_fuzz_target(profiler_stream_decoder_fuzz SOURCES ${_pf}/fuzz_stream_decoder.cpp LIBS memcomm_profiler)
