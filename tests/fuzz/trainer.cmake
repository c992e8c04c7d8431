# memcomm-train's parsers of outside input: IDX files (Fashion-MNIST), checkpoints and the launcher's
# environment. idx_file.cpp is LibTorch-free, so
# it is compiled here directly (the fuzz build has no LibTorch and so no trainer/ targets).
find_package(ZLIB REQUIRED)
memcomm_fuzz_target(idx_fuzz
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/idx_fuzz.cpp ${PROJECT_SOURCE_DIR}/trainer/src/idx_file.cpp
  LIBS ZLIB::ZLIB)
target_include_directories(idx_fuzz PRIVATE ${PROJECT_SOURCE_DIR}/trainer/src)
# The checkpoint file's bytes around LibTorch's archive (checkpoint_file.cpp is LibTorch-free too).
memcomm_fuzz_target(checkpoint_fuzz
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/checkpoint_fuzz.cpp ${PROJECT_SOURCE_DIR}/trainer/src/checkpoint_file.cpp)
target_include_directories(checkpoint_fuzz PRIVATE ${PROJECT_SOURCE_DIR}/trainer/src)
# The launcher's environment (torchrun, Slurm, Lightning): launch.cpp is LibTorch-free as well.
memcomm_fuzz_target(launch_env_fuzz
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/launch_env_fuzz.cpp ${PROJECT_SOURCE_DIR}/trainer/src/launch.cpp)
target_include_directories(launch_env_fuzz PRIVATE ${PROJECT_SOURCE_DIR}/trainer/include)
