/* A valid shared library that is not a xylem plugin: it exports a symbol, but not xylem_plugin_entry. */
#include "xylem/plugin_api.h"

XYLEM_PLUGIN_EXPORT int xylem_fixture_not_a_plugin(void) {
    return 1;
}
