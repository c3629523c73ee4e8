// The pre-dlopen check of a plugin file: everything the dynamic loader maps or reads while it
// loads a library must lie inside the file (a mapped page past the end of a file is a SIGBUS),
// and the header must describe a shared library this process can load at all.
#include "elf_check.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

namespace xylem::detail {
namespace {

using Ehdr = ElfW(Ehdr);
using Phdr = ElfW(Phdr);
using Dyn = ElfW(Dyn);

#if defined(__x86_64__)
constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kMachine = EM_AARCH64;
#elif defined(__powerpc64__)
constexpr uint16_t kMachine = EM_PPC64;
#elif defined(__riscv)
constexpr uint16_t kMachine = EM_RISCV;
#elif defined(__s390x__)
constexpr uint16_t kMachine = EM_S390;
#else
#error "elf_check.cpp: add this architecture's EM_* machine number"
#endif
constexpr unsigned char kClass = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;
constexpr unsigned char kData = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
// More program headers or dynamic entries than any real library has: refuse, do not allocate.
constexpr uint64_t kMaxPhnum = 4096;
constexpr uint64_t kMaxDynamicBytes = 1 << 20;

std::string machine_name(uint16_t m) {
    switch (m) {
        case EM_386:
            return "x86 (3)";
        case EM_ARM:
            return "ARM (40)";
        case EM_X86_64:
            return "x86-64 (62)";
        case EM_AARCH64:
            return "AArch64 (183)";
        case EM_PPC64:
            return "PowerPC64 (21)";
        case EM_RISCV:
            return "RISC-V (243)";
        case EM_S390:
            return "s390 (22)";
        default:
            return "machine " + std::to_string(m);
    }
}

std::string segment_name(uint32_t type) {
    switch (type) {
        case PT_LOAD:
            return "PT_LOAD";
        case PT_DYNAMIC:
            return "PT_DYNAMIC";
        case PT_INTERP:
            return "PT_INTERP";
        case PT_NOTE:
            return "PT_NOTE";
        case PT_PHDR:
            return "PT_PHDR";
        case PT_TLS:
            return "PT_TLS";
        case PT_GNU_EH_FRAME:
            return "PT_GNU_EH_FRAME";
        case PT_GNU_RELRO:
            return "PT_GNU_RELRO";
        case PT_GNU_PROPERTY:
            return "PT_GNU_PROPERTY";
        default:
            return "type " + std::to_string(type);
    }
}

// The end of [start, start + size), or UINT64_MAX when it overflows (never inside any file).
uint64_t end_of(uint64_t start, uint64_t size) {
    uint64_t end;
    return __builtin_add_overflow(start, size, &end) ? UINT64_MAX : end;
}

struct File {
    int fd = -1;
    uint64_t size = 0;
    ~File() {
        if (fd >= 0) ::close(fd);
    }
    // Reads exactly n bytes at offset (the caller checked the range is inside the file).
    bool read(void* out, size_t n, uint64_t offset) const {
        auto* p = static_cast<char*>(out);
        while (n > 0) {
            const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) return false;
            p += got;
            n -= static_cast<size_t>(got);
            offset += static_cast<uint64_t>(got);
        }
        return true;
    }
};

std::string truncated(const std::string& what, uint64_t end, uint64_t size) {
    return "truncated: " + what + " ends at byte " + std::to_string(end) + ", the file has " + std::to_string(size) +
           " bytes";
}

// The PT_LOAD segments' memory images, for "is this address range mapped from the file".
struct Loads {
    std::vector<const Phdr*> segments;
    // [vaddr, vaddr + size) lies in one segment's file-backed part (file_backed) or its memory image.
    bool contain(uint64_t vaddr, uint64_t size, bool file_backed) const {
        const uint64_t end = end_of(vaddr, size);
        for (const Phdr* s : segments) {
            const uint64_t seg_end = end_of(s->p_vaddr, file_backed ? s->p_filesz : s->p_memsz);
            if (vaddr >= s->p_vaddr && end <= seg_end) return true;
        }
        return false;
    }
};

// The dynamic section's table pointers that the loader follows while loading: each must point
// into a loaded segment (with its size, where the section gives one), and every string offset
// into the string table.
std::string check_dynamic(const File& f, const Phdr& dyn, const Loads& loads) {
    const uint64_t bytes = dyn.p_filesz;
    if (bytes > kMaxDynamicBytes) return "PT_DYNAMIC segment is " + std::to_string(bytes) + " bytes (not plausible)";
    std::vector<Dyn> entries(bytes / sizeof(Dyn));
    if (!entries.empty() && !f.read(entries.data(), entries.size() * sizeof(Dyn), dyn.p_offset))
        return "cannot read the dynamic section: " + std::string(std::strerror(errno ? errno : EIO));
    struct Table {
        int64_t addr_tag, size_tag;
        const char* name;
    };
    static constexpr Table kTables[] = {
        {DT_STRTAB, DT_STRSZ, "string table"},
        {DT_SYMTAB, DT_NULL, "symbol table"},
        {DT_HASH, DT_NULL, "hash table"},
        {DT_GNU_HASH, DT_NULL, "GNU hash table"},
        {DT_RELA, DT_RELASZ, "RELA relocations"},
        {DT_REL, DT_RELSZ, "REL relocations"},
        {DT_JMPREL, DT_PLTRELSZ, "PLT relocations"},
#ifdef DT_RELR
        {DT_RELR, DT_RELRSZ, "RELR relocations"},
#endif
        {DT_INIT_ARRAY, DT_INIT_ARRAYSZ, "init array"},
        {DT_FINI_ARRAY, DT_FINI_ARRAYSZ, "fini array"},
        {DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ, "preinit array"},
        {DT_INIT, DT_NULL, "init function"},
        {DT_FINI, DT_NULL, "fini function"},
        {DT_VERSYM, DT_NULL, "symbol versions"},
        {DT_VERDEF, DT_NULL, "version definitions"},
        {DT_VERNEED, DT_NULL, "version needs"},
    };
    auto value_of = [&](int64_t tag, bool& found) -> uint64_t {
        found = false;
        for (const Dyn& d : entries) {
            if (d.d_tag == DT_NULL) break;
            if (d.d_tag == tag) {
                found = true;
                return d.d_un.d_val;
            }
        }
        return 0;
    };
    bool found = false;
    bool terminated = false;
    for (const Dyn& d : entries) terminated |= d.d_tag == DT_NULL;
    if (!terminated) return "the dynamic section has no DT_NULL end marker";
    for (const Table& t : kTables) {
        const uint64_t addr = value_of(t.addr_tag, found);
        if (!found) continue;
        bool sized = false;
        const uint64_t size = t.size_tag != DT_NULL ? value_of(t.size_tag, sized) : 0;
        if (!loads.contain(addr, sized ? size : 1, false))
            return std::string("the dynamic section's ") + t.name + " (address " + std::to_string(addr) +
                   (sized ? ", " + std::to_string(size) + " bytes" : std::string()) +
                   ") is outside every PT_LOAD segment";
    }
    bool has_strsz = false;
    const uint64_t strsz = value_of(DT_STRSZ, has_strsz);
    for (const Dyn& d : entries) {
        if (d.d_tag == DT_NULL) break;
        if (d.d_tag == DT_NEEDED || d.d_tag == DT_SONAME || d.d_tag == DT_RPATH || d.d_tag == DT_RUNPATH)
            if (!has_strsz || d.d_un.d_val >= strsz)
                return "a library name or search path in the dynamic section (string offset " +
                       std::to_string(d.d_un.d_val) + ") is outside its string table";
    }
    return {};
}

}  // namespace

std::string elf_problem(const std::string& path) {
    File f;
    do f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    while (f.fd < 0 && errno == EINTR);
    if (f.fd < 0) return "cannot open: " + std::string(std::strerror(errno));
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) return "cannot stat: " + std::string(std::strerror(errno));
    if (S_ISDIR(st.st_mode)) return "not a regular file (a directory)";
    if (!S_ISREG(st.st_mode)) return "not a regular file";
    f.size = static_cast<uint64_t>(st.st_size);

    Ehdr eh{};
    const size_t head = f.size < sizeof eh ? static_cast<size_t>(f.size) : sizeof eh;
    if (!f.read(&eh, head, 0)) return "cannot read the ELF header: " + std::string(std::strerror(errno ? errno : EIO));
    if (f.size < SELFMAG || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
        return "not an ELF file (" + std::to_string(f.size) + " bytes, no ELF magic number at its start)";
    if (f.size < sizeof eh) return truncated("the ELF header", sizeof eh, f.size);
    if (eh.e_ident[EI_CLASS] != kClass)
        return std::string("a ") + (eh.e_ident[EI_CLASS] == ELFCLASS32 ? "32" : "64") +
               "-bit ELF file, this process is " + (kClass == ELFCLASS64 ? "64" : "32") + "-bit";
    if (eh.e_ident[EI_DATA] != kData)
        return std::string("an ELF file of the other byte order (") +
               (eh.e_ident[EI_DATA] == ELFDATA2MSB ? "big" : "little") + "-endian)";
    if (eh.e_ident[EI_VERSION] != EV_CURRENT || eh.e_version != EV_CURRENT)
        return "unknown ELF version " + std::to_string(eh.e_version);
    if (eh.e_type != ET_DYN) {
        const char* kind = eh.e_type == ET_EXEC   ? "an executable"
                           : eh.e_type == ET_REL  ? "an object file (.o)"
                           : eh.e_type == ET_CORE ? "a core dump"
                                                  : "an ELF file of unknown type";
        return std::string("not a shared library: ") + kind + " (e_type " + std::to_string(eh.e_type) + ")";
    }
    if (eh.e_machine != kMachine)
        return "built for another machine: " + machine_name(eh.e_machine) + ", this process is " +
               machine_name(kMachine);
    if (eh.e_ehsize < sizeof eh) return "ELF header size " + std::to_string(eh.e_ehsize) + " is too small";
    if (eh.e_phentsize != sizeof(Phdr))
        return "program header size " + std::to_string(eh.e_phentsize) + " (expected " + std::to_string(sizeof(Phdr)) +
               ")";
    if (eh.e_phnum == 0 || eh.e_phnum > kMaxPhnum)
        return "implausible program header count " + std::to_string(eh.e_phnum);
    const uint64_t ph_end = end_of(eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Phdr));
    if (ph_end > f.size) return truncated("the program header table", ph_end, f.size);

    std::vector<Phdr> ph(eh.e_phnum);
    if (!f.read(ph.data(), ph.size() * sizeof(Phdr), eh.e_phoff))
        return "cannot read the program headers: " + std::string(std::strerror(errno ? errno : EIO));
    Loads loads;
    const Phdr* dynamic = nullptr;
    for (size_t i = 0; i < ph.size(); ++i) {
        const Phdr& p = ph[i];
        const uint64_t end = end_of(p.p_offset, p.p_filesz);
        const std::string what = segment_name(p.p_type) + " segment " + std::to_string(i);
        if (end > f.size) return truncated(what, end, f.size);
        if (p.p_type == PT_LOAD) {
            if (p.p_filesz > p.p_memsz)
                return what + " has more bytes in the file (" + std::to_string(p.p_filesz) + ") than in memory (" +
                       std::to_string(p.p_memsz) + ")";
            loads.segments.push_back(&p);
        }
        if (p.p_type == PT_DYNAMIC) {
            if (dynamic) return "two PT_DYNAMIC segments";
            dynamic = &p;
        }
    }
    if (loads.segments.empty()) return "no PT_LOAD segment: nothing to load";
    if (!dynamic) return "no PT_DYNAMIC segment: not a shared library";
    // The loader reads these from the mapped image, not from the file: they must be mapped from the file.
    for (size_t i = 0; i < ph.size(); ++i) {
        const Phdr& p = ph[i];
        const bool read_at_load =
            p.p_type == PT_DYNAMIC || p.p_type == PT_NOTE || p.p_type == PT_GNU_PROPERTY || p.p_type == PT_TLS;
        if (read_at_load && p.p_filesz > 0 && !loads.contain(p.p_vaddr, p.p_filesz, true))
            return segment_name(p.p_type) + " segment " + std::to_string(i) +
                   " is not inside the file part of a PT_LOAD segment";
    }
    if (std::string why = check_dynamic(f, *dynamic, loads); !why.empty()) return why;
    // The loader never reads section headers, but they sit at the end of a linker's output:
    // when they are cut off, so is the end of the library, even if no segment is.
    if (eh.e_shnum > 0) {
        const uint64_t sh_end = end_of(eh.e_shoff, uint64_t{eh.e_shnum} * eh.e_shentsize);
        if (sh_end > f.size) return truncated("the section header table", sh_end, f.size);
    }
    return {};
}

}  // namespace xylem::detail
