// Config parsing: defaults, overrides, and errors that name the key.
#include <gtest/gtest.h>

#include "support/config_errors.h"
#include "xylem/config.h"
#include "xylem/error.h"
#include "xylem/layers/conv.h"
#include "xylem/layers/linear.h"
#include "xylem/layers/registry.h"
#include "xylem/layers/reshape.h"

using namespace xylem;

using xylem::test::config_error_of;

TEST(Config, ParsesTheExampleConfigs) {
    for (const char* name : {"fashion_mlp.toml", "leaf_mlp.toml"}) {
        RunConfig c = load_config(std::string(XYLEM_SOURCE_DIR) + "/examples/" + name);
        EXPECT_EQ(c.layers.size(), 6u) << name;
        EXPECT_EQ(c.layers[1].type, "linear");
        EXPECT_EQ(layer_options<LinearOptions>(c.layers[1]).out, 128);
        EXPECT_EQ(c.loss, "cross_entropy");
        EXPECT_EQ(c.solver.type, "sgd");
        EXPECT_EQ(c.out_dir, std::string("runs/") + std::string(name).substr(0, std::string(name).size() - 5));
    }
    // Every example lets auto choose the device (README, "Selecting a backend").
    for (const char* name : {"fashion_mlp", "leaf_mlp", "fashion_lenet", "conv_mlp", "fashion_vgg_small"})
        EXPECT_EQ(load_config(std::string(XYLEM_SOURCE_DIR) + "/examples/" + name + ".toml").backend,
                  std::vector<std::string>{"auto"})
            << name;
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
    EXPECT_EQ(adam.backend, std::vector<std::string>{"auto"});  // no backend key: auto ranks the devices
    EXPECT_EQ(parse_config("backend = [\"tiny\", \"auto\"]\n", "l.toml").backend,
              (std::vector<std::string>{"tiny", "auto"}));
}

TEST(Config, UnknownKeysAreNamed) {
    EXPECT_NE(config_error_of("bakend = [\"native\"]").find("unknown key 'bakend'"), std::string::npos);
    EXPECT_NE(config_error_of("[train]\nbatchsize = 3").find("unknown key 'train.batchsize'"), std::string::npos);
    EXPECT_NE(config_error_of("[[model.layers]]\ntype = \"linear\"\nout = 3\nouts = 4").find("'model.layers[0].outs'"),
              std::string::npos);
}

TEST(Config, WrongTypesAreNamed) {
    EXPECT_NE(config_error_of("[train]\nbatch_size = \"64\"").find("key 'train.batch_size' must be an integer"),
              std::string::npos);
    EXPECT_NE(config_error_of("[solver]\nlr = \"fast\"").find("key 'solver.lr' must be a number"), std::string::npos);
    EXPECT_NE(config_error_of("[solver]\nnesterov = 1").find("key 'solver.nesterov' must be a boolean"), std::string::npos);
    EXPECT_NE(config_error_of("backend = 3").find("key 'backend'"), std::string::npos);
    EXPECT_NE(config_error_of("train = 3").find("key 'train' must be a table"), std::string::npos);
}

TEST(Config, BadValuesAreNamed) {
    EXPECT_NE(config_error_of("[train]\nbatch_size = 0").find("train.batch_size"), std::string::npos);
    EXPECT_NE(config_error_of("[train]\nepochs = -1").find("train.epochs"), std::string::npos);
    EXPECT_NE(config_error_of("[[model.layers]]\ntype = \"linear\"").find("model.layers[0].out"), std::string::npos);
    EXPECT_NE(config_error_of("[[model.layers]]\ntype = \"conv9\"").find("unknown layer type 'conv9'"), std::string::npos);
    EXPECT_NE(config_error_of("[[model.layers]]\ntype = \"dropout\"\np = 1.5").find("model.layers[0].p"), std::string::npos);
    EXPECT_NE(config_error_of("[loss]\ntype = \"hinge\"").find("loss.type"), std::string::npos);
    EXPECT_NE(config_error_of("[solver]\ntype = \"lbfgs\"").find("solver.type"), std::string::npos);
}

TEST(Config, SyntaxErrorsGiveFileLineAndColumn) {
    std::string e = config_error_of("[train\nepochs = 1");
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
    EXPECT_EQ(config_error_of("[data]\nresident = 1\n"), "test.toml: key 'data.resident' must be a boolean (true or false)");
    EXPECT_EQ(config_error_of("[train]\ncapture = \"yes\"\n"), "test.toml: key 'train.capture' must be a boolean (true or false)");
}

// Integer keys are range-checked before they are narrowed to their field: 4294967360 used to
// train at batch 64, a kernel of 4294967297 became 1, epochs = 0 crashed after the run.
TEST(Config, IntegerKeysOutsideTheirRangeNameKeyAndRange) {
    EXPECT_EQ(config_error_of("[train]\nbatch_size = 4294967360\n"),
              "test.toml: key 'train.batch_size' must be in [1, 2147483647], got 4294967360");
    EXPECT_EQ(config_error_of("[train]\nbatch_size = 0\n"),
              "test.toml: key 'train.batch_size' must be in [1, 2147483647], got 0");
    EXPECT_EQ(config_error_of("[train]\nepochs = 0\n"), "test.toml: key 'train.epochs' must be in [1, 2147483647], got 0");
    EXPECT_EQ(config_error_of("[train]\nepochs = 4294967296\n"),
              "test.toml: key 'train.epochs' must be in [1, 2147483647], got 4294967296");
    EXPECT_EQ(config_error_of("[train]\nprint_every = 0\n"),
              "test.toml: key 'train.print_every' must be in [1, 2147483647], got 0");
    EXPECT_EQ(config_error_of("[train]\nmax_steps = -1\n"),
              "test.toml: key 'train.max_steps' must be in [0, 9223372036854775807], got -1");
    EXPECT_EQ(config_error_of("[train]\ncheckpoint_every = -1\n"),
              "test.toml: key 'train.checkpoint_every' must be in [0, 9223372036854775807], got -1");
    EXPECT_EQ(config_error_of("[train]\nseed = -1\n"),
              "test.toml: key 'train.seed' must be in [0, 9223372036854775807], got -1");
    EXPECT_EQ(config_error_of("threads = -1\n"), "test.toml: key 'threads' must be in [0, 1024], got -1");
    EXPECT_EQ(config_error_of("threads = 4294967298\n"), "test.toml: key 'threads' must be in [0, 1024], got 4294967298");
    // A seed past int64 is not a TOML integer at all: the parser names the line.
    EXPECT_EQ(config_error_of("[train]\nseed = 18446744073709551615\n").rfind("test.toml:2:", 0), 0u);

    // The largest values in range are kept exactly.
    RunConfig c = parse_config(
        "threads = 1024\n[train]\nbatch_size = 2147483647\nepochs = 2147483647\n"
        "seed = 9223372036854775807\nmax_steps = 9223372036854775807\n",
        "t.toml");
    EXPECT_EQ(c.threads, 1024);
    EXPECT_EQ(c.batch_size, 2147483647);
    EXPECT_EQ(c.epochs, 2147483647);
    EXPECT_EQ(c.seed, 9223372036854775807ull);
    EXPECT_EQ(c.max_steps, INT64_MAX);
}

TEST(Config, LayerGeometryOutsideItsRangeNamesKeyAndRange) {
    const std::string conv = "[[model.layers]]\ntype = \"conv2d\"\nout = 4\nkernel = 3\n";
    EXPECT_EQ(config_error_of("[[model.layers]]\ntype = \"conv2d\"\nout = 4\nkernel = 4294967297\n"),
              "test.toml: key 'model.layers[0].kernel' must be in [1, 2147483647], got 4294967297");
    EXPECT_EQ(config_error_of("[[model.layers]]\ntype = \"conv2d\"\nout = 4\nkernel = [3, 4294967297]\n"),
              "test.toml: key 'model.layers[0].kernel' entries must be in [1, 2147483647], got 4294967297");
    EXPECT_EQ(config_error_of("[[model.layers]]\ntype = \"maxpool2d\"\nkernel = 0\n"),
              "test.toml: key 'model.layers[0].kernel' must be in [1, 2147483647], got 0");
    EXPECT_EQ(config_error_of(conv + "stride = 0\n"),
              "test.toml: key 'model.layers[0].stride' must be in [1, 2147483647], got 0");
    EXPECT_EQ(config_error_of(conv + "padding = -1\n"),
              "test.toml: key 'model.layers[0].padding' must be in [0, 1073741823], got -1");
    EXPECT_EQ(config_error_of(conv + "padding = 1073741824\n"),
              "test.toml: key 'model.layers[0].padding' must be in [0, 1073741823], got 1073741824");
    EXPECT_EQ(config_error_of(conv + "dilation = 0\n"),
              "test.toml: key 'model.layers[0].dilation' must be in [1, 2147483647], got 0");
    EXPECT_EQ(config_error_of(conv + "groups = 4294967297\n"),
              "test.toml: key 'model.layers[0].groups' must be in [1, 2147483647], got 4294967297");
    EXPECT_EQ(config_error_of("[[model.layers]]\ntype = \"conv2d\"\nout = 0\nkernel = 3\n"),
              "test.toml: key 'model.layers[0].out' must be in [1, 2147483647], got 0");
    EXPECT_EQ(config_error_of("[[model.layers]]\ntype = \"linear\"\nout = 4294967306\n"),
              "test.toml: key 'model.layers[0].out' must be in [1, 2147483647], got 4294967306");
    // A stride that is not given is the layer's default: 1 for conv, 0 (the kernel) for pools.
    EXPECT_EQ(layer_options<Conv2dOptions>(parse_config(conv, "t.toml").layers[0]).stride, 1);
    EXPECT_EQ(layer_options<Pool2dConfig>(parse_config("[[model.layers]]\ntype = \"maxpool2d\"\nkernel = 3\n", "t.toml")
                                              .layers[0])
                  .pool.stride,
              0);
    EXPECT_EQ(layer_options<Conv2dOptions>(parse_config(conv + "stride = 2\npadding = 1\n", "t.toml").layers[0]).padding, 1);
}

TEST(Config, ReshapeEntriesAreMinusOneOrPositive) {
    const std::string reshape = "[[model.layers]]\ntype = \"reshape\"\nshape = ";
    EXPECT_EQ(layer_options<ReshapeOptions>(parse_config(reshape + "[-1, 4, 7]\n", "t.toml").layers[0]).shape,
              (Shape{-1, 4, 7}));
    EXPECT_EQ(config_error_of(reshape + "[0, 4]\n"),
              "test.toml: key 'model.layers[0].shape' entries must be -1 or in [1, 2147483647], got 0");
    EXPECT_EQ(config_error_of(reshape + "[-2, 4]\n"),
              "test.toml: key 'model.layers[0].shape' entries must be -1 or in [1, 2147483647], got -2");
    EXPECT_EQ(config_error_of(reshape + "[4294967297]\n"),
              "test.toml: key 'model.layers[0].shape' entries must be -1 or in [1, 2147483647], got 4294967297");
    EXPECT_EQ(config_error_of(reshape + "[-1, 4, -1]\n"), "test.toml: key 'model.layers[0].shape' may hold at most one -1");
    EXPECT_EQ(config_error_of(reshape + "[2147483647, 2147483647, 2147483647]\n"),
              "test.toml: key 'model.layers[0].shape' describes more than 2^63 - 1 elements");
}

// nan and inf are valid TOML floats, and 1e300 is a finite double but inf as a float: all an error.
TEST(Config, FloatKeysMustBeFinite) {
    EXPECT_EQ(config_error_of("[solver]\nlr = nan\n"), "test.toml: key 'solver.lr' must be a finite number, got nan");
    EXPECT_EQ(config_error_of("[solver]\nlr = inf\n"), "test.toml: key 'solver.lr' must be a finite number, got inf");
    EXPECT_EQ(config_error_of("[solver]\nlr = 1e300\n"), "test.toml: key 'solver.lr' must be a finite number, got 1e+300");
    EXPECT_EQ(config_error_of("[solver]\nmomentum = -inf\n"),
              "test.toml: key 'solver.momentum' must be a finite number, got -inf");
    EXPECT_EQ(config_error_of("[solver]\nweight_decay = nan\n"),
              "test.toml: key 'solver.weight_decay' must be a finite number, got nan");
    EXPECT_EQ(config_error_of("[[model.layers]]\ntype = \"batchnorm\"\neps = inf\n"),
              "test.toml: key 'model.layers[0].eps' must be a finite number, got inf");
    EXPECT_EQ(config_error_of("[[model.layers]]\ntype = \"dropout\"\np = nan\n"),
              "test.toml: key 'model.layers[0].p' must be a finite number, got nan");
    EXPECT_FLOAT_EQ(parse_config("[solver]\nlr = 1e-30\n", "t.toml").solver.lr, 1e-30f);
}

// Every section refuses a key it does not know, naming it with its full dotted path: a misspelt
// key never silently keeps its default.
TEST(Config, UnknownKeyInEverySectionIsNamed) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"bogus = 1", "'bogus'"},
        {"[data]\nbogus = 1", "'data.bogus'"},
        {"[model]\nbogus = 1", "'model.bogus'"},
        {"[[model.layers]]\ntype = \"relu\"\nbogus = 1", "'model.layers[0].bogus'"},
        {"[[model.layers]]\ntype = \"linear\"\nout = 3\nbogus = 1", "'model.layers[0].bogus'"},
        {"[[model.layers]]\ntype = \"conv2d\"\nout = 3\nkernel = 3\nbogus = 1", "'model.layers[0].bogus'"},
        {"[[model.layers]]\ntype = \"maxpool2d\"\nkernel = 2\nbogus = 1", "'model.layers[0].bogus'"},
        {"[[model.layers]]\ntype = \"avgpool2d\"\nkernel = 2\nbogus = 1", "'model.layers[0].bogus'"},
        {"[[model.layers]]\ntype = \"batchnorm\"\nbogus = 1", "'model.layers[0].bogus'"},
        {"[[model.layers]]\ntype = \"dropout\"\nbogus = 1", "'model.layers[0].bogus'"},
        {"[[model.layers]]\ntype = \"reshape\"\nshape = [-1]\nbogus = 1", "'model.layers[0].bogus'"},
        {"[loss]\nbogus = 1", "'loss.bogus'"},
        {"[solver]\nbogus = 1", "'solver.bogus'"},
        {"[solver.schedule]\nbogus = 1", "'solver.schedule.bogus'"},
        {"[train]\nbogus = 1", "'train.bogus'"},
        {"[train]\nearly_stopping = { patience = 2, bogus = 1 }", "'train.early_stopping.bogus'"},
    };
    for (const auto& [text, key] : cases) {
        const std::string e = config_error_of(text);
        EXPECT_NE(e.find("unknown key " + key), std::string::npos) << text << "\n -> " << e;
    }
}

TEST(Config, ScheduleKeysAreCheckedNamingTheKey) {
    auto e = [](const std::string& body) { return config_error_of("[solver.schedule]\n" + body); };
    EXPECT_NE(e("type = \"linear\"").find("solver.schedule.type"), std::string::npos);
    EXPECT_NE(e("type = \"step\"").find("solver.schedule.step_size' is required"), std::string::npos);
    EXPECT_NE(e("type = \"step\"\nstep_size = 0").find("solver.schedule.step_size' must be in [1,"), std::string::npos);
    EXPECT_NE(e("type = \"cosine\"").find("solver.schedule.t_max' is required"), std::string::npos);
    EXPECT_NE(e("type = \"cosine\"\nt_max = 5\ngamma = 0.5").find("'solver.schedule.gamma' is not used by a 'cosine'"),
              std::string::npos);
    EXPECT_NE(e("type = \"multistep\"\nmilestones = [5, 3]").find("solver.schedule.milestones' must be increasing"),
              std::string::npos);
    EXPECT_NE(e("type = \"exponential\"\ngamma = 1.5").find("solver.schedule.gamma' must be in (0, 1]"), std::string::npos);
    EXPECT_NE(e("unit = \"batch\"").find("solver.schedule.unit"), std::string::npos);
    EXPECT_NE(e("warmup_steps = -3").find("solver.schedule.warmup_steps"), std::string::npos);
    EXPECT_NE(e("warmup_start = 2").find("solver.schedule.warmup_start"), std::string::npos);
    const RunConfig c = parse_config("[solver.schedule]\ntype = \"multistep\"\nmilestones = [3, 6]\ngamma = 0.5\n"
                                     "warmup_steps = 100",
                                     "t.toml");
    EXPECT_EQ(c.solver.schedule.milestones, (std::vector<int64_t>{3, 6}));
    EXPECT_TRUE(c.solver.schedule.active());
    EXPECT_FALSE(parse_config("", "t.toml").solver.schedule.active());
}

TEST(Config, EarlyStoppingAndStepLimits) {
    EXPECT_NE(config_error_of("[train]\nearly_stopping = { patience = 0 }").find("train.early_stopping.patience"),
              std::string::npos);
    EXPECT_NE(config_error_of("[train]\nearly_stopping = { metric = \"val_loss\", patience = 2 }").find("no validation set"),
              std::string::npos);
    EXPECT_NE(config_error_of("[train]\nearly_stopping = 3").find("train.early_stopping' must be a table"), std::string::npos);
    EXPECT_NE(config_error_of("[train]\nsteps_per_epoch = -1").find("train.steps_per_epoch"), std::string::npos);
    const RunConfig c =
        parse_config("[data]\nvalidation = 0.2\n[train]\nearly_stopping = { patience = 3, min_delta = 0.01 }", "t.toml");
    EXPECT_EQ(c.early_stopping.metric, "val_loss");  // the best metric's default
    EXPECT_EQ(c.early_stopping.patience, 3);
    EXPECT_DOUBLE_EQ(c.early_stopping.min_delta, 0.01);
}

// [data] text: files or folders, exclusions, seq_len; the validation share defaults to the text's
// last 5%, and text keys without text (or text with data.dir or mse) are errors naming the key.
TEST(Config, TextDataKeys) {
    RunConfig c = parse_config("[data]\ntext = [\"/a\", \"/b\"]\ntext_exclude = [\"*.dat\", \"*.u8\"]\nseq_len = 20\n",
                               "test.toml");
    EXPECT_TRUE(c.is_text());
    EXPECT_EQ(c.text_paths, (std::vector<std::string>{"/a", "/b"}));
    EXPECT_EQ(c.text_exclude, (std::vector<std::string>{"*.dat", "*.u8"}));
    EXPECT_EQ(c.seq_len, 20);
    EXPECT_DOUBLE_EQ(c.validation_fraction, 0.05);
    EXPECT_EQ(c.best_metric, "val_loss");  // a validation set, by default
    RunConfig one = parse_config("[data]\ntext = \"/a\"\nvalidation = 0\n", "test.toml");
    EXPECT_EQ(one.text_paths, std::vector<std::string>{"/a"});
    EXPECT_EQ(one.seq_len, 50);
    EXPECT_EQ(one.validation_fraction, 0.0);
    EXPECT_EQ(one.validation_count, 0);
    EXPECT_EQ(parse_config("[data]\ntext = \"/a\"\nvalidation = 1000\n", "test.toml").validation_count, 1000);
    EXPECT_FALSE(parse_config("", "test.toml").is_text());

    EXPECT_EQ(config_error_of("[data]\ntext = []\n"), "test.toml: key 'data.text' must name at least one file or folder");
    EXPECT_EQ(config_error_of("[data]\ntext = \"/a\"\ndir = \"/d\"\n"),
              "test.toml: key 'data.text' cannot be combined with data.dir (text or images, not both)");
    EXPECT_EQ(config_error_of("[data]\nseq_len = 10\n"), "test.toml: key 'data.seq_len' applies to text data only (set data.text)");
    EXPECT_EQ(config_error_of("[data]\ntext_exclude = [\"*\"]\n"),
              "test.toml: key 'data.text_exclude' applies to text data only (set data.text)");
    EXPECT_EQ(config_error_of("[data]\ntext = \"/a\"\nseq_len = 0\n"), "test.toml: key 'data.seq_len' must be in [1, 2147483647], got 0");
    EXPECT_EQ(config_error_of("[data]\ntext = \"/a\"\n[loss]\ntype = \"mse\"\n"),
              "test.toml: key 'loss.type' is mse, which does not apply to text data: a character model predicts classes "
              "(cross_entropy or nll)");
}

// toml++ recurses once per dotted-key part and crashed on a 50,000-part key (issue 26): the depth of
// every key path (dotted keys, [table] headers, inline tables, arrays) is checked before it parses.
TEST(Config, DeepKeysAreRefusedBeforeTomlParses) {
    auto dotted = [](int parts) {
        std::string k = "x";
        for (int i = 1; i < parts; ++i) k += ".y";
        return k;
    };
    const std::string refused = "the config nests deeper than 256 levels (dotted key parts, [table] header parts, "
                                "arrays and inline tables together)";
    EXPECT_EQ(config_error_of("backend = \"native\"\n" + dotted(50000) + " = 1\n"), "test.toml:2: " + refused);
    EXPECT_EQ(config_error_of("[" + dotted(50000) + "]\na = 1\n"), "test.toml:1: " + refused);
    EXPECT_EQ(config_error_of("[[" + dotted(50000) + "]]\n"), "test.toml:1: " + refused);
    EXPECT_EQ(config_error_of("[" + dotted(200) + "]\n" + dotted(57) + " = 1\n"), "test.toml:2: " + refused);
    // Inline tables add their keys' depths: 200 + 50 + 7 parts.
    EXPECT_EQ(config_error_of(dotted(200) + " = { " + dotted(50) + " = { a = 1, " + dotted(7) + " = 2 } }"),
              "test.toml:1: " + refused);
    EXPECT_EQ(config_error_of("a = " + std::string(300, '[') + std::string(300, ']')), "test.toml:1: " + refused);
    // At the limit toml++ reads it, and the schema names the key.
    EXPECT_EQ(config_error_of(dotted(256) + " = 1").rfind("test.toml: unknown key 'x'", 0), 0u);
    EXPECT_EQ(config_error_of("[" + dotted(200) + "]\n" + dotted(56) + " = 1\n").rfind("test.toml: unknown key 'x'", 0), 0u);
    // Dots in strings, comments, numbers and quoted keys are not key parts.
    const std::string dots(1000, '.');
    RunConfig c = parse_config("# " + dots + "\nbackend = \"" + dots + "\" # " + dots + "\n[solver]\nlr = 0.5\n"
                               "[train]\n\"out\" = '''\n" + dots + "\n'''\n", "test.toml");
    EXPECT_EQ(c.backend, std::vector<std::string>{dots});
    EXPECT_EQ(c.out_dir, dots + "\n");
    EXPECT_EQ(config_error_of("\"" + dots + "\" = 1").rfind("test.toml: unknown key", 0), 0u);
}
