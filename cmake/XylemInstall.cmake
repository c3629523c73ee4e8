# Install rules and the CMake package (XylemConfig.cmake, its version file, exported targets).
include(CMakePackageConfigHelpers)
set(_pkg_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Xylem)

install(TARGETS xylem_core xylem_plugin_api EXPORT XylemTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/include/xylem DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT XylemTargets NAMESPACE xylem:: DESTINATION ${_pkg_dir})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/XylemConfig.cmake.in
  ${PROJECT_BINARY_DIR}/XylemConfig.cmake INSTALL_DESTINATION ${_pkg_dir}
  PATH_VARS XYLEM_PLUGIN_INSTALL_DIR CMAKE_INSTALL_BINDIR)
# The package version gates the build API; plugins are checked by ABI version when loaded.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/XylemConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/XylemConfig.cmake ${PROJECT_BINARY_DIR}/XylemConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/XylemPlugin.cmake DESTINATION ${_pkg_dir})
