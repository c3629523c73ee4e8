// Tests for AtomicFile / write_file_atomic: replacement, cleanup of uncommitted temps, error text.
#include "xylem/io/atomic_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "support/files.h"
#include "xylem/error.h"

namespace fs = std::filesystem;
using xylem::test::read_file;
using xylem::io::AtomicFile;

namespace {

class AtomicFileTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::string pattern = ::testing::TempDir() + "xylem_atomic_XXXXXX";
        ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
        dir_ = pattern;
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string file(const std::string& name) const { return dir_ + "/" + name; }
    size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator())); }

    std::string dir_;
};

TEST_F(AtomicFileTest, WritesAndReplaces) {
    xylem::io::write_file_atomic(file("metrics.json"), "{\"loss\": 1}\n");
    EXPECT_EQ(read_file(file("metrics.json")), "{\"loss\": 1}\n");
    xylem::io::write_file_atomic(file("metrics.json"), "");
    EXPECT_EQ(read_file(file("metrics.json")), "");
    EXPECT_EQ(entries(), 1u);  // no temp left behind
}

TEST_F(AtomicFileTest, TempNameAndUncommittedCleanup) {
    xylem::io::write_file_atomic(file("a"), "old");
    {
        AtomicFile f(file("a"));
        EXPECT_EQ(f.temp_path(), file("a") + ".tmp." + std::to_string(::getpid()));
        f.write("new contents", 12);
        EXPECT_TRUE(fs::exists(f.temp_path()));
        EXPECT_EQ(read_file(file("a")), "old");  // untouched until commit
    }
    EXPECT_EQ(read_file(file("a")), "old");
    EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicFileTest, CommitTwiceIsAnError) {
    AtomicFile f(file("b"));
    f.write("x", 1);
    f.commit();
    EXPECT_EQ(read_file(file("b")), "x");
    EXPECT_THROW(f.commit(), xylem::Error);
    EXPECT_THROW(f.write("y", 1), xylem::Error);
    EXPECT_EQ(read_file(file("b")), "x");
}

TEST_F(AtomicFileTest, MissingDirectory) {
    const std::string path = file("no/such/dir/metrics.json");
    try {
        xylem::io::write_file_atomic(path, "x");
        FAIL() << "expected xylem::Error";
    } catch (const xylem::Error& e) {
        EXPECT_EQ(std::string(e.what()), path + ": cannot create temporary file " + path + ".tmp." +
                                             std::to_string(::getpid()) + ": No such file or directory");
    }
}

TEST_F(AtomicFileTest, RenameFailureRemovesTemp) {
    fs::create_directory(file("target"));
    EXPECT_THROW(xylem::io::write_file_atomic(file("target"), "x"), xylem::Error);
    EXPECT_TRUE(fs::is_directory(file("target")));
    EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicFileTest, RelativePathInCurrentDirectory) {
    const fs::path old_cwd = fs::current_path();
    fs::current_path(dir_);
    EXPECT_NO_THROW(xylem::io::write_file_atomic("rel.txt", "r"));  // directory fsync uses "."
    fs::current_path(old_cwd);
    EXPECT_EQ(read_file(file("rel.txt")), "r");
}

}  // namespace

// A killed process's temp file (its pid no longer exists) is removed; a live process's, a file
// of this process and files that only look alike are left alone.
TEST(AtomicFileCleanup, RemovesOnlyTempFilesOfDeadProcesses) {
    const fs::path dir = fs::temp_directory_path() / ("xylem_stale_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const pid_t dead = fork();
    if (dead == 0) _exit(0);
    ASSERT_GT(dead, 0);
    int status = 0;
    waitpid(dead, &status, 0);  // reaped: the pid names no process now
    auto touch = [&](const std::string& name) { std::ofstream(dir / name) << "x"; };
    touch("last.safetensors.tmp." + std::to_string(dead));
    touch("metrics.json.tmp.1");                                 // pid 1 is alive
    touch("log.csv.tmp." + std::to_string(::getpid()));          // ours
    touch("notes.tmp.txt");                                      // not a pid
    touch("last.safetensors");
    const std::vector<std::string> removed = xylem::io::remove_stale_temp_files(dir.string());
    ASSERT_EQ(removed.size(), 1u);
    EXPECT_EQ(removed[0], (dir / ("last.safetensors.tmp." + std::to_string(dead))).string());
    for (const char* kept : {"metrics.json.tmp.1", "notes.tmp.txt", "last.safetensors"}) EXPECT_TRUE(fs::exists(dir / kept));
    EXPECT_TRUE(fs::exists(dir / ("log.csv.tmp." + std::to_string(::getpid()))));
    fs::remove_all(dir);
}

// The signal-safe cleanup removes the temp file of a write in flight, never the final name.
TEST(AtomicFileCleanup, LiveTempFilesAreRemovedForAnImmediateExit) {
    const fs::path dir = fs::temp_directory_path() / ("xylem_live_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string path = (dir / "model.safetensors").string();
    xylem::io::write_file_atomic(path, "old");
    {
        xylem::io::AtomicFile f(path);
        f.write("new", 3);
        ASSERT_TRUE(fs::exists(f.temp_path()));
        xylem::io::remove_live_temp_files();  // what the second Ctrl-C does before _exit
        EXPECT_FALSE(fs::exists(f.temp_path()));
    }
    std::ifstream in(path);
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), "old");
    fs::remove_all(dir);
}

// No file xylem writes follows a link it did not make: the log appender and the reader of its own
// files refuse a symbolic link at the name (the target is untouched); an atomic write replaces the
// link itself, never its target. Files never get others' write permission, even under umask 0.
TEST_F(AtomicFileTest, NoWriteFollowsAPlantedLinkAndNoFileIsWorldWritable) {
    const std::string target = file("target.txt");
    std::ofstream(target) << "keep";
    fs::create_symlink(target, file("log.csv"));
    try {
        xylem::io::AppendFile log(file("log.csv"));
        FAIL() << "appended through a symbolic link";
    } catch (const xylem::Error& e) {
        EXPECT_EQ(std::string(e.what()), file("log.csv") + " is a symbolic link: xylem does not write through a link "
                                                            "it did not make (remove it, or write elsewhere)");
    }
    EXPECT_THROW(xylem::io::read_own_file(file("log.csv")), xylem::Error);
    xylem::io::write_file_atomic(file("log.csv"), "new\n");
    EXPECT_EQ(read_file(target), "keep");
    EXPECT_FALSE(fs::is_symlink(file("log.csv")));
    EXPECT_EQ(xylem::io::read_own_file(file("log.csv")), "new\n");

    const mode_t old = ::umask(0);
    xylem::io::write_file_atomic(file("a"), "x");
    { xylem::io::AppendFile b(file("b")); b.write("y"); }
    ::umask(old);
    for (const char* f : {"a", "b"})
        EXPECT_EQ(fs::status(file(f)).permissions() & fs::perms::others_write, fs::perms::none) << f;
    EXPECT_EQ(read_file(file("b")), "y");
    // A FIFO named like the log is no file to append to (it would block or feed a reader).
    ASSERT_EQ(::mkfifo(file("fifo").c_str(), 0600), 0);
    EXPECT_THROW(xylem::io::read_own_file(file("fifo")), xylem::Error);
    EXPECT_THROW(xylem::io::AppendFile fifo(file("fifo")), xylem::Error);
}
