# xylem_add_plugin(<name> SOURCES ... [LIBRARIES ...]): builds libxylem_<name>.so as a MODULE
# into the shared plugin folder, with hidden visibility so only the entry point is exported.
function(xylem_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIR" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT ARG_OUTPUT_DIR)
    set(ARG_OUTPUT_DIR ${XYLEM_PLUGIN_OUTPUT_DIR})
  endif()
  set(target xylem_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/core/include)
  target_link_libraries(${target} PRIVATE ${ARG_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib" OUTPUT_NAME "xylem_${name}"
    LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIR}
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_link_options(${target} PRIVATE -Wl,--no-undefined)
endfunction()
