# Profiler parsers of outside input: the .mct file reader, the live stream decoder and the
# torch.profiler trace reader.
set(_pf ${CMAKE_CURRENT_LIST_DIR}/profiler)
memcomm_fuzz_target(profiler_trace_reader_fuzz SOURCES ${_pf}/fuzz_trace_reader.cpp LIBS memcomm_trace_analysis)
memcomm_fuzz_target(profiler_stream_decoder_fuzz SOURCES ${_pf}/fuzz_stream_decoder.cpp LIBS memcomm_profiler)
# The torch.profiler (Kineto) JSON reader; seeds are small traces and slices of real ones.
memcomm_fuzz_target(profiler_kineto_reader_fuzz SOURCES ${_pf}/fuzz_kineto_reader.cpp LIBS memcomm_trace_analysis)
# The same reader through a file, which takes the gzip path (seeds: gzip members of small traces).
memcomm_fuzz_target(profiler_kineto_file_fuzz SOURCES ${_pf}/fuzz_kineto_file.cpp LIBS memcomm_trace_analysis)
