// No plugin file can crash the process that looks at it. The ELF check refuses truncated and
// foreign files before dlopen (these tests load them in-process: without the check they die
// of SIGBUS), and a scan with Isolation::child survives plugins whose own code crashes, exits
// or hangs, and loads nothing but the backend it selects.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "loader/plugin_corpus.h"
#include "xylem/error.h"
#include "xylem/op_calls.h"
#include "xylem/registry.h"
#include "xylem/tensor.h"

namespace xylem {
namespace {
namespace fs = std::filesystem;
using test::ScratchDir;

const std::string kFixtureDir = XYLEM_TEST_FIXTURE_PLUGIN_DIR;
const std::string kPluginDir = XYLEM_TEST_PLUGIN_DIR;
const std::string kCrashDir = XYLEM_TEST_CRASH_PLUGIN_DIR;
const std::string kHangDir = XYLEM_TEST_HANG_PLUGIN_DIR;

std::string fixture_file(const std::string& stem, const std::string& dir = kFixtureDir) {
    return dir + "/libxylem_" + stem + ".so";
}

const PluginRecord& record_of(const Registry& r, const std::string& stem) {
    for (const PluginRecord& p : r.plugins())
        if (fs::path(p.path).filename() == "libxylem_" + stem + ".so") return p;
    throw std::runtime_error("no record for libxylem_" + stem + ".so");
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected a xylem::Error";
    return {};
}

bool starts_with(const std::string& s, const std::string& prefix) {
    return s.rfind(prefix, 0) == 0;
}

// Whether this process has the library mapped (RTLD_NOLOAD never loads it).
bool mapped_here(const std::string& path) {
    void* h = dlopen(fs::canonical(path).c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (h) dlclose(h);
    return h != nullptr;
}

// Every probing child was reaped: this process has no child left, zombie or running.
void expect_no_children() {
    int status = 0;
    EXPECT_EQ(waitpid(-1, &status, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
}

// The Elf64_Phdr of the first segment of `type` in a plugin file, and its index.
struct SegmentAt {
    size_t index;
    ElfW(Phdr) phdr;
    size_t file_offset;  // of the program header itself
};
SegmentAt segment_of(const std::vector<char>& bytes, uint32_t type) {
    ElfW(Ehdr) eh;
    std::memcpy(&eh, bytes.data(), sizeof eh);
    for (size_t i = 0; i < eh.e_phnum; ++i) {
        ElfW(Phdr) ph;
        const size_t at = eh.e_phoff + i * sizeof ph;
        std::memcpy(&ph, bytes.data() + at, sizeof ph);
        if (ph.p_type == type) return {i, ph, at};
    }
    throw std::runtime_error("no segment of type " + std::to_string(type));
}

TEST(ElfCheck, TruncatedCopiesOfEveryPluginAreRefusedBeforeDlopen) {
    ScratchDir dir("elf_cut");
    std::vector<fs::path> plugins = test::real_plugins(kPluginDir);
    ASSERT_FALSE(plugins.empty());
    plugins.push_back(fixture_file("fixture"));
    for (const fs::path& plugin : plugins) {
        for (const test::CutFile& cut : test::write_cut_copies(plugin, dir.path)) {
            Registry r;
            const PluginRecord& rec = r.load_file(cut.path.string());  // in this process
            EXPECT_FALSE(rec.loaded) << cut.path;
            const std::string& why = rec.reason;
            if (cut.length == 0) {
                EXPECT_EQ(why, "not an ELF file (0 bytes, no ELF magic number at its start)");
            } else if (cut.length == 16) {
                EXPECT_EQ(why, "truncated: the ELF header ends at byte 64, the file has 16 bytes");
            } else if (cut.length == 64) {
                EXPECT_TRUE(starts_with(why, "truncated: the program header table ends at byte ")) << why;
            } else {
                EXPECT_TRUE(starts_with(why, "truncated: ")) << cut.path << ": " << why;
                EXPECT_NE(why.find("the file has " + std::to_string(cut.length) + " bytes"), std::string::npos) << why;
            }
        }
    }
    // The cut lengths end in segments for every real plugin, not only in headers.
    Registry r;
    const PluginRecord& half =
        r.load_file((dir.path / ("libxylem_cut_native_" +
                                 std::to_string(fs::file_size(kPluginDir + "/libxylem_native.so") / 2) + ".so"))
                        .string());
    EXPECT_TRUE(starts_with(half.reason, "truncated: PT_LOAD segment ")) << half.reason;
}

TEST(ElfCheck, HeaderFieldsNameWhatIsWrong) {
    ScratchDir dir("elf_fields");
    const fs::path good = fixture_file("fixture");
    const std::vector<char> bytes = test::read_bytes(good);
    struct Case {
        std::string stem;
        size_t offset;
        std::vector<unsigned char> value;
        std::string expected;  // the start of the reason
    };
    const uint16_t machine = test::foreign_machine();
    const uint16_t exec = ET_EXEC;
    const uint16_t zero16 = 0;
    const uint64_t far = uint64_t{1} << 40;
    auto raw = [](const void* p, size_t n) {
        const auto* b = static_cast<const unsigned char*>(p);
        return std::vector<unsigned char>(b, b + n);
    };
    const std::vector<Case> cases = {
        {"machine", offsetof(ElfW(Ehdr), e_machine), raw(&machine, 2), "built for another machine: "},
        {"class32", EI_CLASS, {ELFCLASS32}, "a 32-bit ELF file, this process is 64-bit"},
        {"bigendian", EI_DATA, {ELFDATA2MSB}, "an ELF file of the other byte order (big-endian)"},
        {"executable", offsetof(ElfW(Ehdr), e_type), raw(&exec, 2), "not a shared library: an executable"},
        {"phentsize", offsetof(ElfW(Ehdr), e_phentsize), raw(&zero16, 2), "program header size 0"},
        {"phnum", offsetof(ElfW(Ehdr), e_phnum), raw(&zero16, 2), "implausible program header count 0"},
        {"phoff", offsetof(ElfW(Ehdr), e_phoff), raw(&far, 8), "truncated: the program header table ends at byte "},
    };
    for (const Case& c : cases) {
        const fs::path p = dir.path / ("libxylem_" + c.stem + ".so");
        test::write_patched(good, p, c.offset, c.value.data(), c.value.size());
        Registry r;
        const PluginRecord& rec = r.load_file(p.string());
        EXPECT_FALSE(rec.loaded) << c.stem;
        EXPECT_TRUE(starts_with(rec.reason, c.expected)) << c.stem << ": " << rec.reason;
    }

    // PT_DYNAMIC moved out of every loaded segment (the loader reads it from memory).
    const SegmentAt dyn = segment_of(bytes, PT_DYNAMIC);
    const fs::path moved = dir.path / "libxylem_dynamic_moved.so";
    test::write_patched(good, moved, dyn.file_offset + offsetof(ElfW(Phdr), p_vaddr), &far, sizeof far);
    // A table the dynamic section points to, outside every loaded segment.
    std::vector<char> patched = bytes;
    for (size_t at = dyn.phdr.p_offset; at + sizeof(ElfW(Dyn)) <= dyn.phdr.p_offset + dyn.phdr.p_filesz;
         at += sizeof(ElfW(Dyn))) {
        ElfW(Dyn) d;
        std::memcpy(&d, patched.data() + at, sizeof d);
        if (d.d_tag == DT_STRTAB) std::memcpy(patched.data() + at + offsetof(ElfW(Dyn), d_un), &far, sizeof far);
    }
    const fs::path strtab = dir.path / "libxylem_strtab_far.so";
    test::write_bytes(strtab, patched.data(), patched.size());
    test::write_bytes(dir.path / "libxylem_junk.so", "#!/bin/sh\necho not a library\n", 29);
    fs::create_directory(dir.path / "libxylem_folder.so");

    Registry r;
    EXPECT_EQ(r.load_file(moved.string()).reason,
              "PT_DYNAMIC segment " + std::to_string(dyn.index) + " is not inside the file part of a PT_LOAD segment");
    EXPECT_TRUE(starts_with(r.load_file(strtab.string()).reason, "the dynamic section's string table (address "))
        << r.load_file(strtab.string()).reason;
    EXPECT_EQ(r.load_file((dir.path / "libxylem_junk.so").string()).reason,
              "not an ELF file (29 bytes, no ELF magic number at its start)");
    EXPECT_EQ(r.load_file((dir.path / "libxylem_folder.so").string()).reason, "not a regular file (a directory)");
    // And the unpatched file passes.
    const PluginRecord& ok = r.load_file(good.string());
    EXPECT_TRUE(ok.loaded && ok.available) << ok.reason;
}

TEST(ChildProbe, PluginsThatCrashExitOrAbortAreListedWithTheirSignal) {
    Registry r;
    r.scan({kCrashDir}, Isolation::child);
    const std::string said = " (its last output: \"";
    const std::string crash_ctor = record_of(r, "crash_ctor").reason;
    EXPECT_EQ(crash_ctor,
              "crashed while loading: signal 11 (SIGSEGV)" + said + "crash_ctor: failing in my constructor\")");
    const std::string abort_ctor = record_of(r, "abort_ctor").reason;
    EXPECT_EQ(abort_ctor,
              "crashed while loading: signal 6 (SIGABRT)" + said + "abort_ctor: failing in my constructor\")");
    const std::string exit_ctor = record_of(r, "exit_ctor").reason;
    EXPECT_EQ(exit_ctor, "exited while loading with status 3" + said + "exit_ctor: failing in my constructor\")");
    EXPECT_EQ(record_of(r, "crash_dep").reason, "crashed while loading: signal 11 (SIGSEGV)");

    // A crash in the probe comes after the table was read: the record names the backend.
    const PluginRecord& probe = record_of(r, "crash_probe");
    EXPECT_EQ(probe.reason, "crashed in its probe: signal 11 (SIGSEGV)");
    EXPECT_EQ(probe.name, "crash_probe");
    EXPECT_EQ(probe.abi, std::to_string(XYLEM_ABI_MAJOR) + "." + std::to_string(XYLEM_ABI_MINOR));

    for (const PluginRecord& p : r.plugins()) {
        EXPECT_FALSE(p.loaded || p.available || p.backend) << p.path;
        EXPECT_FALSE(mapped_here(p.path)) << p.path << " was loaded into the scanning process";
    }
    EXPECT_FALSE(mapped_here(std::string(XYLEM_BINARY_DIR) + "/test_plugin_deps/libxylem_fixture_crashdep.so"));
    expect_no_children();

    // Asked for by name, each says why it cannot be used.
    EXPECT_NE(error_of([&] { r.select("crash_probe"); }).find("crashed in its probe: signal 11"), std::string::npos);
    const std::string msg = error_of([&] { r.select_first({"crash_ctor", "abort_ctor"}); });
    EXPECT_NE(msg.find("backend 'crash_ctor' is unavailable: " +
                       fs::canonical(fixture_file("crash_ctor", kCrashDir)).string() +
                       ": crashed while loading: signal 11 (SIGSEGV)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("signal 6 (SIGABRT)"), std::string::npos) << msg;
}

TEST(ChildProbe, PluginThatHangsIsKilledAfterTheTimeout) {
    Registry r;
    r.set_probe_timeout(std::chrono::milliseconds(500));
    const auto t0 = std::chrono::steady_clock::now();
    const PluginRecord& rec = r.probe_file(fixture_file("hang_ctor", kHangDir));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(rec.reason,
              "hung while loading: killed after 0.5 s (its last output: \"hang_ctor: failing in my constructor\")");
    EXPECT_FALSE(rec.loaded);
    EXPECT_GE(seconds, 0.5);
    EXPECT_LT(seconds, 5.0);
    expect_no_children();
}

// Probing in a child gives the records loading in-process gives (but no backends).
TEST(ChildProbe, AgreesWithInProcessLoading) {
    Registry child, here;
    child.scan({kFixtureDir, kPluginDir}, Isolation::child);  // first: nothing is loaded here yet
    for (const PluginRecord& p : child.plugins()) EXPECT_FALSE(mapped_here(p.path)) << p.path;
    here.scan({kFixtureDir, kPluginDir}, Isolation::in_process);
    ASSERT_EQ(child.plugins().size(), here.plugins().size());
    ASSERT_GE(child.plugins().size(), 8u);
    for (size_t i = 0; i < child.plugins().size(); ++i) {
        const PluginRecord& c = child.plugins()[i];
        const PluginRecord& h = here.plugins()[i];
        EXPECT_EQ(c.path, h.path);
        EXPECT_EQ(c.name, h.name) << c.path;
        EXPECT_EQ(c.version, h.version) << c.path;
        EXPECT_EQ(c.abi, h.abi) << c.path;
        EXPECT_EQ(c.loaded, h.loaded) << c.path;
        EXPECT_EQ(c.available, h.available) << c.path;
        EXPECT_EQ(c.reason, h.reason) << c.path;
        EXPECT_EQ(c.probe.device_count, h.probe.device_count) << c.path;
        EXPECT_EQ(c.device_kinds, h.device_kinds) << c.path;
        EXPECT_FALSE(c.backend) << c.path;
    }
    expect_no_children();
}

TEST(ChildProbe, OnlyTheSelectedPluginIsLoadedIntoThisProcess) {
    Registry r;
    r.scan({kCrashDir, kFixtureDir}, Isolation::child);
    std::shared_ptr<Backend> b =
        r.select_first({"crash_ctor", "crash_probe", "abort_ctor", "fixture_offline", "fixture"});
    ASSERT_TRUE(b);
    EXPECT_EQ(b->name(), "fixture");
    EXPECT_EQ(r.select("fixture"), b);  // loaded once
    Device& dev = *b->device(0);
    Tensor t({7}, DType::F32);
    ops::fill(dev, t, 3.0f);
    EXPECT_EQ(t.to_vector(), std::vector<float>(7, 3.0f));

    EXPECT_TRUE(mapped_here(fixture_file("fixture")));
    for (const PluginRecord& p : r.plugins()) {
        if (p.path == fs::canonical(fixture_file("fixture")).string()) continue;
        EXPECT_FALSE(mapped_here(p.path)) << p.path << " was loaded but not selected";
    }
}

TEST(ChildProbe, FirstFileWithANameWinsAndACrashedOneShadowsNothing) {
    ScratchDir a("shadow_a"), b("shadow_b");
    fs::copy_file(fixture_file("fixture"), b.path / "libxylem_fixture.so");
    fs::copy_file(fixture_file("crash_probe", kCrashDir), a.path / "libxylem_a_crash_probe.so");
    Registry r;
    r.scan({kFixtureDir, b.path.string(), a.path.string(), kCrashDir}, Isolation::child);
    const std::string original = fs::canonical(fixture_file("fixture")).string();
    const PluginRecord& copy = record_of(r, "fixture");  // the first libxylem_fixture.so recorded
    const PluginRecord* second = nullptr;
    for (const PluginRecord& p : r.plugins())
        if (p.path == (b.path / "libxylem_fixture.so").string()) second = &p;
    ASSERT_NE(second, nullptr);
    EXPECT_EQ(copy.path, original);
    EXPECT_EQ(second->reason, "shadowed by " + original + " (same backend name 'fixture')");
    EXPECT_EQ(r.select("fixture")->path(), original);
    // Two files named crash_probe: both crash, neither is "shadowed".
    EXPECT_EQ(record_of(r, "a_crash_probe").reason, "crashed in its probe: signal 11 (SIGSEGV)");
    EXPECT_EQ(record_of(r, "crash_probe").reason, "crashed in its probe: signal 11 (SIGSEGV)");
}

}  // namespace
}  // namespace xylem
