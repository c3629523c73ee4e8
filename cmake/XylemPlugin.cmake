# xylem_add_plugin(<name> SOURCES ... [LIBRARIES ...] [OUTPUT_DIR dir]): builds libxylem_<name>.so
# as a MODULE with hidden visibility, so only the entry point (XYLEM_PLUGIN_EXPORT) is exported,
# and -Wl,--no-undefined, so a missing symbol fails the link instead of the user's dlopen.
# The same file serves xylem's own build and the installed SDK (find_package(Xylem)).
function(xylem_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIR" "SOURCES;LIBRARIES" ${ARGN})
  set(_out ${ARG_OUTPUT_DIR})
  if(NOT _out)
    if(XYLEM_PLUGIN_OUTPUT_DIR)
      set(_out ${XYLEM_PLUGIN_OUTPUT_DIR})
    else()
      set(_out ${CMAKE_CURRENT_BINARY_DIR})
    endif()
  endif()
  set(target xylem_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  # Plugins see the ABI headers only, never the core library.
  target_link_libraries(${target} PRIVATE xylem::plugin_api ${ARG_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib" OUTPUT_NAME "xylem_${name}"
    LIBRARY_OUTPUT_DIRECTORY ${_out}
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_link_options(${target} PRIVATE -Wl,--no-undefined)
  # Inside xylem's build, the real plugins (those in the shared folder, not test fixtures) are
  # installed next to the core and listed for the per-plugin conformance tests.
  if(XYLEM_PLUGIN_INSTALL_DIR AND NOT ARG_OUTPUT_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION ${XYLEM_PLUGIN_INSTALL_DIR} COMPONENT plugins)
    set_property(GLOBAL APPEND PROPERTY XYLEM_PLUGINS ${name})
  endif()
endfunction()
