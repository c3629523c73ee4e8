// The layer registry: a layer type registered from this test file alone (no core or app change)
// is read by parse_config with every strict-config rule and built into a model that runs; the
// built-in types are all registered and build the layer their config names.
#include "support/config_errors.h"
#include "xylem/layers/registry.h"

#include <cmath>
#include <memory>

#include "support/backends.h"
#include "xylem/config.h"
#include "xylem/error.h"
#include "xylem/layers/conv.h"
#include "xylem/layers/embedding.h"
#include "xylem/layers/linear.h"
#include "xylem/layers/net.h"

namespace xylem::test {
namespace {

// ---- a test-only layer type, as docs/adding-a-layer.md describes -----------------------------

// Passes its input through, but only one whose per-sample shape is [width]: the built layer
// shows that the parsed options reach it.
struct CheckWidthOptions {
    int64_t width = 0;  // required, in [1, 64]
    float scale = 1.0f;
    std::string note;
};

class CheckWidth : public Layer {
public:
    explicit CheckWidth(CheckWidthOptions o) : o_(std::move(o)) {}
    std::string kind() const override { return "test_check_width"; }
    Shape output_shape(const Shape& input) const override {
        if (input != Shape{o_.width}) shape_error("expects its width", input, {o_.width});
        return input;
    }
    const Tensor& forward(Device&, const Tensor& x, bool) override { return y_ = x; }
    const Tensor& backward(Device&, const Tensor& dy, bool) override { return dx_ = dy; }
    const CheckWidthOptions& options() const { return o_; }

private:
    CheckWidthOptions o_;
    Tensor y_, dx_;
};

const LayerRegistration<CheckWidthOptions> kCheckWidth{
    "test_check_width", {"width", "scale", "note"},
    [](const ConfigSection& s) {
        CheckWidthOptions o;
        if (!s.has("width")) s.fail("width", "is required for a test_check_width layer");
        s.get("width", o.width, IntRange{1, 64});
        s.get("scale", o.scale);
        s.get("note", o.note);
        return o;
    },
    [](const CheckWidthOptions& o, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<CheckWidth>(o); }};

const std::string kHead = "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"test_check_width\"\n";

std::unique_ptr<Net> build(const RunConfig& c) {
    auto model = std::make_unique<Net>();
    LayerContext context(c.source, c.seed);
    for (const LayerSpec& l : c.layers) model->add(build_layer(l, context));
    return model;
}

// ---- a registered type is parsed with every strict-config rule -----------------------------

TEST(LayerRegistry, ATestOnlyTypeIsParsedFromItsTable) {
    const RunConfig c = parse_config(kHead + "width = 6\nscale = 2.5\nnote = \"hi\"\n", "t.toml");
    ASSERT_EQ(c.layers.size(), 2u);
    EXPECT_EQ(c.layers[1].type, "test_check_width");
    const CheckWidthOptions& o = layer_options<CheckWidthOptions>(c.layers[1]);
    EXPECT_EQ(o.width, 6);
    EXPECT_FLOAT_EQ(o.scale, 2.5f);
    EXPECT_EQ(o.note, "hi");
    EXPECT_FLOAT_EQ(layer_options<CheckWidthOptions>(parse_config(kHead + "width = 1\n", "t.toml").layers[1]).scale,
                    1.0f);  // absent: its default
}

TEST(LayerRegistry, ATestOnlyTypesKeysFollowTheConfigRules) {
    EXPECT_EQ(config_error_of(kHead + "width = 6\nbogus = 1\n"),
              "test.toml: unknown key 'model.layers[1].bogus' (known keys here: enabled, inputs, name, note, scale, shares, type, "
              "width)");
    EXPECT_EQ(config_error_of(kHead), "test.toml: key 'model.layers[1].width' is required for a test_check_width layer");
    EXPECT_EQ(config_error_of(kHead + "width = 65\n"), "test.toml: key 'model.layers[1].width' must be in [1, 64], got 65");
    EXPECT_EQ(config_error_of(kHead + "width = 6.0\n"), "test.toml: key 'model.layers[1].width' must be an integer");
    EXPECT_EQ(config_error_of(kHead + "width = 6\nscale = inf\n"),
              "test.toml: key 'model.layers[1].scale' must be a finite number, got inf");
    EXPECT_EQ(config_error_of(kHead + "width = 6\nscale = 1e300\n"),
              "test.toml: key 'model.layers[1].scale' must be a finite number, got 1e+300");
    EXPECT_EQ(config_error_of(kHead + "width = 6\nnote = 3\n"), "test.toml: key 'model.layers[1].note' must be a string");
    // An unknown type lists every registered one, this test's included.
    const std::string e = config_error_of("[[model.layers]]\ntype = \"conv9\"\n");
    EXPECT_NE(e.find("key 'model.layers[0].type' names an unknown layer type 'conv9' (known: add, attention, avgpool2d, batchnorm, "),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("test_check_width"), std::string::npos) << e;
    EXPECT_EQ(config_error_of("[[model.layers]]\nout = 3\n"), "test.toml: key 'model.layers[0].type' is required");
    EXPECT_EQ(config_error_of("[[model.layers]]\ntype = 3\n"), "test.toml: key 'model.layers[0].type' must be a string");
}

// ---- and built into a model that runs ------------------------------------------------------

class LayerRegistryTest : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(LayerRegistryTest);

TEST_P(LayerRegistryTest, ATestOnlyTypeBuildsAndRuns) {
    const RunConfig c = parse_config(kHead + "width = 6\n", "t.toml");
    std::unique_ptr<Net> model = build(c);
    ASSERT_EQ(model->size(), 2u);
    auto* layer = dynamic_cast<CheckWidth*>(&model->layer(1));
    ASSERT_NE(layer, nullptr);
    EXPECT_EQ(layer->options().width, 6);
    model->build(dev(), {2, 3}, 1);
    EXPECT_EQ(model->output_sample_shape(), Shape{6});
    const std::vector<float> in{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    EXPECT_EQ(model->forward(dev(), upload(dev(), {2, 2, 3}, in), false).to_vector(), in);
    EXPECT_NE(model->summary().find("test_check_width"), std::string::npos) << model->summary();

    // The option reached the layer: a width that does not match the input is refused at build.
    std::unique_ptr<Net> narrow = build(parse_config(kHead + "width = 5\n", "t.toml"));
    try {
        narrow->build(dev(), {2, 3}, 1);
        ADD_FAILURE() << "a width of 5 accepted 6 features";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("test_check_width"), std::string::npos) << e.what();
    }
}

// ---- the built-in types --------------------------------------------------------------------

TEST(LayerRegistry, EveryBuiltInTypeBuildsTheLayerItNames) {
    const std::vector<std::string> types{"linear", "conv2d", "maxpool2d", "avgpool2d", "batchnorm", "relu", "sigmoid",
                                         "tanh",   "softmax", "log_softmax", "flatten", "reshape", "dropout", "lstm", "gru",
                                         "embedding", "one_hot"};
    std::string text;
    for (const std::string& t : types) {
        EXPECT_NE(find_layer_type(t), nullptr) << t;
        text += "[[model.layers]]\ntype = \"" + t + "\"\n";
        if (t == "linear" || t == "conv2d") text += "out = 4\n";
        if (t == "conv2d" || t == "maxpool2d" || t == "avgpool2d") text += "kernel = 2\n";
        if (t == "reshape") text += "shape = [-1]\n";
        if (t == "lstm" || t == "gru") text += "hidden = 4\n";
        if (t == "embedding") text += "dim = 3\nvocab = 5\n";
        if (t == "one_hot") text += "vocab = 5\n";
    }
    const RunConfig c = parse_config(text, "t.toml");
    ASSERT_EQ(c.layers.size(), types.size());
    LayerContext context(c.source, c.seed);
    for (size_t i = 0; i < types.size(); ++i) {
        EXPECT_EQ(c.layers[i].type, types[i]);
        EXPECT_EQ(build_layer(c.layers[i], context)->kind(), types[i]);
    }
}

// Text models size their input and output layers from the data's vocabulary unless the config
// gives the sizes; without a vocabulary (images) that is an error naming what needs one.
TEST(LayerRegistry, TokenLayersAndLinearTakeTheVocabularyFromTheData) {
    const RunConfig c = parse_config("[[model.layers]]\ntype = \"embedding\"\ndim = 3\ninit = 0.08\n"
                                     "[[model.layers]]\ntype = \"one_hot\"\n"
                                     "[[model.layers]]\ntype = \"linear\"\nout = \"vocab\"\ninit = 0.08\n",
                                     "t.toml");
    EXPECT_EQ(layer_options<EmbeddingOptions>(c.layers[0]).vocab, 0);
    EXPECT_FLOAT_EQ(layer_options<EmbeddingOptions>(c.layers[0]).init, 0.08f);
    EXPECT_TRUE(layer_options<LinearOptions>(c.layers[2]).out_from_vocabulary);
    LayerContext with(c.source, c.seed, 9);
    auto embedding = build_layer(c.layers[0], with);
    EXPECT_EQ(dynamic_cast<Embedding&>(*embedding).vocab(), 9);
    EXPECT_EQ(dynamic_cast<OneHot&>(*build_layer(c.layers[1], with)).vocab(), 9);
    EXPECT_EQ(dynamic_cast<Linear&>(*build_layer(c.layers[2], with)).out_features(), 9);
    LayerContext without(c.source, c.seed);
    for (size_t i = 0; i < 3; ++i) {
        try {
            build_layer(c.layers[i], without);
            ADD_FAILURE() << "layer " << i << " was built without a vocabulary";
        } catch (const Error& e) {
            EXPECT_TRUE(contains(e.what(), "t.toml: ")) << e.what();
            EXPECT_TRUE(contains(e.what(), "takes its size from the data's vocabulary, and only text data ([data] text) has one"))
                << e.what();
        }
    }
}

TEST(LayerRegistry, TokenLayerKeysFollowTheConfigRules) {
    auto error = [](const std::string& table) {
        try {
            parse_config("[[model.layers]]\n" + table, "t.toml");
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("<no error>");
    };
    EXPECT_EQ(error("type = \"embedding\"\nvocab = 5\n"), "t.toml: key 'model.layers[0].dim' is required for an embedding layer");
    EXPECT_TRUE(contains(error("type = \"embedding\"\ndim = 0\n"), "key 'model.layers[0].dim' must be in [1, "));
    EXPECT_EQ(error("type = \"embedding\"\ndim = 2\ninit = 0.0\n"),
              "t.toml: key 'model.layers[0].init' must be positive (the bound of U(-init, init)); leave it out for "
              "PyTorch's N(0, 1)");
    EXPECT_TRUE(contains(error("type = \"one_hot\"\ndim = 2\n"), "unknown key 'model.layers[0].dim'"));
    EXPECT_EQ(error("type = \"linear\"\nout = \"many\"\n"),
              "t.toml: key 'model.layers[0].out' must be a count of features or \"vocab\" (the data's vocabulary size), "
              "got 'many'");
}

TEST(LayerRegistry, PoolsNeedASquareKernelWhenBuilt) {
    const RunConfig c = parse_config("[[model.layers]]\ntype = \"avgpool2d\"\nkernel = [2, 3]\n", "t.toml");
    const Pool2dConfig& o = layer_options<Pool2dConfig>(c.layers[0]);
    EXPECT_EQ(o.kernel_h, 2);
    EXPECT_EQ(o.kernel_w, 3);
    LayerContext context(c.source, c.seed);
    try {
        build_layer(c.layers[0], context);
        ADD_FAILURE() << "a 2x3 pool was built";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "t.toml: avgpool2d needs a square kernel");
    }
}

// Dropout layers draw their mask seeds in model order from the run's seed (as before the registry:
// a resumed run and a checkpoint's counters depend on it).
TEST(LayerRegistry, LayerSeedsFollowTheRunSeedInModelOrder) {
    LayerContext context("t.toml", 3);
    EXPECT_EQ(context.next_seed(), 3 * 0x9E3779B97F4A7C15ull);
    EXPECT_EQ(context.next_seed(), 3 * 0x9E3779B97F4A7C15ull + 1);
}

// ---- misuse is an Error naming the type ----------------------------------------------------

TEST(LayerRegistry, MisuseIsAnErrorNamingTheType) {
    LayerType twice;
    twice.name = "test_check_width";
    twice.keys = {};
    twice.parse = [](const ConfigSection&) { return std::make_shared<LayerOptions>(); };
    twice.build = [](const LayerOptions&, LayerContext&) { return std::unique_ptr<Layer>(); };
    try {
        register_layer_type(twice);
        ADD_FAILURE() << "a second test_check_width was registered";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "layer type 'test_check_width' is registered twice");
    }
    LayerType no_factory = twice;
    no_factory.name = "test_no_factory";
    no_factory.build = nullptr;
    EXPECT_THROW(register_layer_type(no_factory), Error);
    EXPECT_EQ(find_layer_type("test_no_factory"), nullptr);

    const RunConfig c = parse_config("[[model.layers]]\ntype = \"linear\"\nout = 3\n", "t.toml");
    EXPECT_THROW(layer_options<CheckWidthOptions>(c.layers[0]), Error);  // not its options type
    LayerSpec bare;  // made by hand, never parsed
    bare.type = "dropout";
    LayerContext context("t.toml", 1);
    try {
        build_layer(bare, context);
        ADD_FAILURE() << "a spec without options was built";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'dropout' has no options"), std::string::npos) << e.what();
    }
}

// Without the registry (a program that does not link xylem_layers) the core refuses layers by
// saying why, instead of accepting them unchecked.
TEST(LayerRegistry, TheCoreRefusesLayersWithoutARegistry) {
    set_layer_table_parser(nullptr);
    const std::string e = config_error_of("[[model.layers]]\ntype = \"relu\"\n");
    set_layer_table_parser(&parse_layer);
    EXPECT_EQ(e, "test.toml: key 'model.layers' cannot be read by this program: it does not link the layer registry "
                 "(xylem_layers)");
    EXPECT_EQ(config_error_of("[[model.layers]]\ntype = \"relu\"\n"), "(no error)");
}

}  // namespace
}  // namespace xylem::test
