// `xylem run` and `xylem import` as a user meets them, with or without ONNX support in the build:
// usage errors exit 2 with the command's usage; a file that is no ONNX model is one line on stderr
// (exit 1) naming it, or, in a build without libonnx-dev, saying so. The models themselves are
// tests/onnx (importer_test.cpp, check_models.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cli_run.h"

using xylem::test::run_cli;

TEST(OnnxCli, UsageErrorsNameWhatIsMissing) {
    auto r = run_cli("run");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err.rfind("xylem: run needs an ONNX model file (MODEL.onnx)\nusage: xylem run MODEL.onnx", 0), 0u) << r.err;
    r = run_cli("run model.onnx");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err.rfind("xylem: run needs --input FILE.npy", 0), 0u) << r.err;
    r = run_cli("import model.onnx");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err.rfind("xylem: import needs --out DIR", 0), 0u) << r.err;
    r = run_cli("import a.onnx b.onnx --out d");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err.rfind("xylem: unexpected argument 'b.onnx'", 0), 0u) << r.err;
}

TEST(OnnxCli, AFileThatIsNoModelIsOneLineNamingIt) {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "xylem_onnx_cli_test";
    std::filesystem::create_directories(dir);
    const std::string model = (dir / "junk.onnx").string();
    std::ofstream(model) << "this is not a protobuf \xff\xff\xff\xff";
    const auto r = run_cli("import " + model + " --out " + (dir / "out").string());
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out, "");
    const bool without = r.err.find("built without ONNX support") != std::string::npos;
    const bool named = r.err.rfind("xylem: error: " + model + ": not an ONNX model", 0) == 0;
    EXPECT_TRUE(without || named) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "out" / "junk.toml"));
    std::filesystem::remove_all(dir);
}
