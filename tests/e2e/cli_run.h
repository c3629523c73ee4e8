// Runs the built `xylem` program with stdout and stderr kept apart, for the end-to-end tests of
// what a user sees (streams and exit codes).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace xylem::test {

struct CliResult {
    int code = -1;
    std::string out, err;
};

// `args` go through the shell as written; `env` is a list of NAME=VALUE words set for the run.
inline CliResult run_cli(const std::string& args, const std::string& env = "") {
    const std::filesystem::path err_file =
        std::filesystem::temp_directory_path() / ("xylem_cli_err_" + std::to_string(::getpid()));
    const std::string cmd = "env " + env + " " + std::string(XYLEM_BINARY_DIR) + "/bin/xylem " + args + " 2>" +
                            err_file.string();
    CliResult r;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf;
    while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
    const int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::ostringstream err;
    err << std::ifstream(err_file).rdbuf();
    r.err = err.str();
    std::filesystem::remove(err_file);
    return r;
}

}  // namespace xylem::test
