// The one Catch2 main for every memcomm test executable (see tests/CMakeLists.txt).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
