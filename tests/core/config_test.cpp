// Config parsing: defaults, overrides, and errors that name the key.
#include <gtest/gtest.h>

#include "xylem/config.h"
#include "xylem/error.h"

using namespace xylem;

namespace {
std::string error_of(const std::string& text) {
    try {
        parse_config(text, "test.toml");
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}
}  // namespace

TEST(Config, ParsesTheExampleConfigs) {
    for (const char* name : {"fashion_mlp.toml", "leaf_mlp.toml"}) {
        RunConfig c = load_config(std::string(XYLEM_SOURCE_DIR) + "/examples/" + name);
        EXPECT_EQ(c.layers.size(), 6u) << name;
        EXPECT_EQ(c.layers[1].type, "linear");
        EXPECT_EQ(c.layers[1].out, 128);
        EXPECT_EQ(c.loss, "cross_entropy");
        EXPECT_EQ(c.solver.type, "sgd");
        EXPECT_EQ(c.out_dir, std::string("runs/") + std::string(name).substr(0, std::string(name).size() - 5));
    }
    RunConfig leaf = load_config(std::string(XYLEM_SOURCE_DIR) + "/examples/leaf_mlp.toml");
    EXPECT_EQ(leaf.batch_size, 20);
    EXPECT_FLOAT_EQ(leaf.solver.momentum, 0.03f);
}

TEST(Config, DefaultsAndScalars) {
    RunConfig c = parse_config("backend = \"native\"\n[[model.layers]]\ntype = \"flatten\"\n[solver]\nlr = 1\n", "t.toml");
    EXPECT_EQ(c.backend, std::vector<std::string>{"native"});
    EXPECT_FLOAT_EQ(c.solver.lr, 1.0f);  // an integer is accepted for a float key
    EXPECT_EQ(c.batch_size, 64);
    EXPECT_EQ(c.out_dir, "runs/t");
    RunConfig adam = parse_config("[solver]\ntype = \"adam\"\n", "a.toml");
    EXPECT_FLOAT_EQ(adam.solver.lr, 0.001f);  // Adam's own default
}

TEST(Config, UnknownKeysAreNamed) {
    EXPECT_NE(error_of("bakend = [\"native\"]").find("unknown key 'bakend'"), std::string::npos);
    EXPECT_NE(error_of("[train]\nbatchsize = 3").find("unknown key 'train.batchsize'"), std::string::npos);
    EXPECT_NE(error_of("[[model.layers]]\ntype = \"linear\"\nout = 3\nouts = 4").find("'model.layers[0].outs'"),
              std::string::npos);
}

TEST(Config, WrongTypesAreNamed) {
    EXPECT_NE(error_of("[train]\nbatch_size = \"64\"").find("key 'train.batch_size' must be an integer"),
              std::string::npos);
    EXPECT_NE(error_of("[solver]\nlr = \"fast\"").find("key 'solver.lr' must be a number"), std::string::npos);
    EXPECT_NE(error_of("[solver]\nnesterov = 1").find("key 'solver.nesterov' must be a boolean"), std::string::npos);
    EXPECT_NE(error_of("backend = 3").find("key 'backend'"), std::string::npos);
    EXPECT_NE(error_of("train = 3").find("key 'train' must be a table"), std::string::npos);
}

TEST(Config, BadValuesAreNamed) {
    EXPECT_NE(error_of("[train]\nbatch_size = 0").find("train.batch_size"), std::string::npos);
    EXPECT_NE(error_of("[train]\nepochs = -1").find("train.epochs"), std::string::npos);
    EXPECT_NE(error_of("[[model.layers]]\ntype = \"linear\"").find("model.layers[0].out"), std::string::npos);
    EXPECT_NE(error_of("[[model.layers]]\ntype = \"conv9\"").find("unknown layer type 'conv9'"), std::string::npos);
    EXPECT_NE(error_of("[[model.layers]]\ntype = \"dropout\"\np = 1.5").find("model.layers[0].p"), std::string::npos);
    EXPECT_NE(error_of("[loss]\ntype = \"hinge\"").find("loss.type"), std::string::npos);
    EXPECT_NE(error_of("[solver]\ntype = \"lbfgs\"").find("solver.type"), std::string::npos);
}

TEST(Config, SyntaxErrorsGiveFileLineAndColumn) {
    std::string e = error_of("[train\nepochs = 1");
    EXPECT_EQ(e.rfind("test.toml:1:", 0), 0u) << e;
}

TEST(Config, MissingFileIsAnError) {
    EXPECT_THROW(load_config("/nonexistent/x.toml"), Error);
}

TEST(Config, ResidentDataAndCaptureKeys) {
    RunConfig c = parse_config("", "t.toml");
    EXPECT_FALSE(c.data_resident);
    EXPECT_FALSE(c.capture);
    c = parse_config("[data]\nresident = true\n[train]\ncapture = true\n", "t.toml");
    EXPECT_TRUE(c.data_resident);
    EXPECT_TRUE(c.capture);
    EXPECT_EQ(error_of("[data]\nresident = 1\n"), "test.toml: key 'data.resident' must be a boolean (true or false)");
    EXPECT_EQ(error_of("[train]\ncapture = \"yes\"\n"), "test.toml: key 'train.capture' must be a boolean (true or false)");
}
