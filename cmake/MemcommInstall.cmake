# cmake --install: the tools plus an exported package, so another program can
#   find_package(memcomm) and link memcomm::allocator / memcomm::profiler.
include(CMakePackageConfigHelpers)

get_property(_exported GLOBAL PROPERTY MEMCOMM_EXPORTED_TARGETS)
if(_exported)
  install(TARGETS ${_exported} EXPORT memcommTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT memcommTargets NAMESPACE memcomm:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memcomm)
endif()
get_property(_tools GLOBAL PROPERTY MEMCOMM_TOOLS)
if(_tools)
  install(TARGETS ${_tools} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/memcommConfig.cmake.in
  ${PROJECT_BINARY_DIR}/memcommConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memcomm)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/memcommConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/memcommConfig.cmake ${PROJECT_BINARY_DIR}/memcommConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memcomm)
