# cmake -DOUT=<file.cpp> -DKERNEL_DIR=<dir> -DFAMILIES="a;b" -P embed_kernels.cmake
# Writes family_name()/family_source(): kernels/common.cl prepended to kernels/<family>.cl, as raw
# string literals, so the plugin carries its kernels and needs no files at run time. The families
# and their order come from opencl.h's XYLEM_OPENCL_FAMILIES; a family there without a file here
# fails the static_assert below.
file(READ "${KERNEL_DIR}/common.cl" common)
set(body "// Generated from ${KERNEL_DIR}/*.cl by embed_kernels.cmake. Do not edit.\n")
string(APPEND body "#include \"opencl.h\"\n\nnamespace xylem::opencl {\n\nnamespace {\n")
set(entries "")
foreach(family IN LISTS FAMILIES)
  file(READ "${KERNEL_DIR}/${family}.cl" text)
  string(APPEND body "const char k_${family}[] = R\"xylemcl(${common}\n/* ---- ${family}.cl ---- */\n${text})xylemcl\";\n")
  string(APPEND entries "    {\"${family}\", k_${family}},\n")
endforeach()
string(APPEND body "
struct Embedded {
    const char* file;
    const char* source;
};
constexpr Embedded kEmbedded[] = {
${entries}};

constexpr bool same(const char* a, const char* b) { return *a == *b && (!*a || same(a + 1, b + 1)); }
constexpr const char* find(const char* file) {
    for (const Embedded& e : kEmbedded)
        if (same(e.file, file)) return e.source;
    return nullptr;
}

#define XYLEM_FAMILY_CHECK_(Enum, file) static_assert(find(#file), \"kernels/\" #file \".cl is missing\");
XYLEM_OPENCL_FAMILIES(XYLEM_FAMILY_CHECK_)
#define XYLEM_FAMILY_NAME_(Enum, file) #file,
const char* const kNames[] = {XYLEM_OPENCL_FAMILIES(XYLEM_FAMILY_NAME_)};
#define XYLEM_FAMILY_SOURCE_(Enum, file) find(#file),
const char* const kSources[] = {XYLEM_OPENCL_FAMILIES(XYLEM_FAMILY_SOURCE_)};

}  // namespace

const char* family_name(Family f) { return kNames[static_cast<int>(f)]; }
const char* family_source(Family f) { return kSources[static_cast<int>(f)]; }

}  // namespace xylem::opencl
")
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
