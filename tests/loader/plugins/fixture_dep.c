/* The helper library libxylem_needs_dep.so links against; built where the loader cannot find it. */
int xylem_fixture_dep_answer(void) {
    return 42;
}
