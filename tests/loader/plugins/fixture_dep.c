/* The helper library libxylem_needs_dep.so links against; built where the loader cannot find it.
 * Built a second time with DEP_CRASHES (libxylem_fixture_crashdep.so, found through the rpath of
 * libxylem_crash_dep.so): a dependency whose own constructor segfaults. */
#ifdef DEP_CRASHES
__attribute__((constructor)) static void crash_while_loading(void) {
    volatile int* volatile p = 0;
    *p = 1;
}
#endif

int xylem_fixture_dep_answer(void) {
    return 42;
}
