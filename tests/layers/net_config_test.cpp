// [model] as a graph: names and inputs, blocks written once and instantiated with a count and
// arguments, layers left out with enabled = false, and the load-time errors of each.
#include <string>

#include "support/backends.h"
#include "support/config_errors.h"
#include "xylem/config.h"
#include "xylem/error.h"

namespace xylem::test {
namespace {

struct Wired {
    std::string type, name, inputs, shares;
};

std::vector<Wired> wiring(const std::string& text) {
    std::vector<Wired> out;
    for (const LayerSpec& l : parse_config(text, "test.toml").layers) {
        std::string inputs;
        for (const std::string& i : l.inputs) inputs += (inputs.empty() ? "" : ",") + i;
        out.push_back({l.type, l.name, inputs, l.shares});
    }
    return out;
}

std::string describe(const std::vector<Wired>& w) {
    std::string s;
    for (const Wired& l : w) s += l.name + "(" + l.type + ")<-" + l.inputs + (l.shares.empty() ? "" : " shares " + l.shares) + "\n";
    return s;
}

// A chain: each layer named by its place and reading the one before, the first the model input.
TEST(NetConfig, AChainIsNamedByPosition) {
    EXPECT_EQ(describe(wiring("[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 3\n"
                              "[[model.layers]]\ntype = \"relu\"\n")),
              "0(flatten)<-input\n1(linear)<-0\n2(relu)<-1\n");
}

TEST(NetConfig, NamesInputsAndShares) {
    const std::string text = R"(
[[model.layers]]
name = "h"
type = "linear"
out = 4
[[model.layers]]
type = "tanh"
[[model.layers]]
name = "tied"
type = "linear"
out = 4
shares = "h"
[[model.layers]]
type = "add"
inputs = ["tied", "h"]
)";
    EXPECT_EQ(describe(wiring(text)), "h(linear)<-input\n1(tanh)<-h\ntied(linear)<-1 shares h\n3(add)<-tied,h\n");
}

const std::string kBlocks = R"(
[model.blocks.pair]
args = { width = 4, last = true }
layers = [
  { name = "fc", type = "linear", out = "$width" },
  { name = "act", type = "tanh", enabled = "$last" },
  { name = "sum", type = "add", inputs = ["act", "input"] },
]
[[model.layers]]
name = "stem"
type = "linear"
out = 4
)";

// Instances are "<name>.<r>.", a block without a count one module "<name>."; "input" is the
// instance's input; a layer left out stands for its input.
TEST(NetConfig, BlocksExpandWithNestedNames) {
    const std::string text = kBlocks + R"(
[[model.layers]]
name = "stage"
type = "block"
block = "pair"
count = 2
first = { last = false }
[[model.layers]]
name = "one"
type = "block"
block = "pair"
[[model.layers]]
type = "linear"
out = 2
)";
    EXPECT_EQ(describe(wiring(text)),
              "stem(linear)<-input\n"
              "stage.0.fc(linear)<-stem\n"
              "stage.0.sum(add)<-stage.0.fc,stem\n"  // act left out: its name is fc's output
              "stage.1.fc(linear)<-stage.0.sum\n"
              "stage.1.act(tanh)<-stage.1.fc\n"
              "stage.1.sum(add)<-stage.1.act,stage.0.sum\n"
              "one.fc(linear)<-stage.1.sum\n"
              "one.act(tanh)<-one.fc\n"
              "one.sum(add)<-one.act,stage.1.sum\n"
              "3(linear)<-one.sum\n");  // model.layers[3]
}

TEST(NetConfig, BlockErrorsNameTheKey) {
    auto with = [](const std::string& layer) { return kBlocks + "[[model.layers]]\ntype = \"block\"\n" + layer; };
    EXPECT_TRUE(contains(config_error_of(with("block = \"nope\"\n")), "key 'model.layers[1].block' names no block 'nope' (blocks: pair)"));
    EXPECT_TRUE(contains(config_error_of(with("block = \"pair\"\nargs = { depth = 3 }\n")),
                         "key 'model.layers[1].args' sets 'depth', which block 'pair' does not take"));
    EXPECT_TRUE(contains(config_error_of(with("block = \"pair\"\ncount = 0\n")), "key 'model.layers[1].count' must be in [1, "));
    EXPECT_TRUE(contains(config_error_of(with("block = \"pair\"\nargs = { width = \"four\" }\n")),
                         "key 'model.blocks.pair.layers[0].out' must be a count of features"));
    // An argument no block declares, and one used outside any block.
    EXPECT_TRUE(contains(config_error_of("[model.blocks.b]\nlayers = [ { type = \"linear\", out = \"$n\" } ]\n"
                                         "[[model.layers]]\ntype = \"block\"\nblock = \"b\"\n"),
                         "key 'model.blocks.b.layers[0].out' is \"$n\" but block 'b' has no argument 'n' (its arguments: none)"));
    EXPECT_TRUE(contains(config_error_of("[[model.layers]]\ntype = \"linear\"\nout = \"$n\"\n"),
                         "key 'model.layers[0].out' is \"$n\", a block argument, outside a block"));
    // A block that contains itself, directly or through another.
    EXPECT_TRUE(contains(config_error_of("[model.blocks.a]\nlayers = [ { type = \"block\", block = \"b\" } ]\n"
                                         "[model.blocks.b]\nlayers = [ { type = \"block\", block = \"a\" } ]\n"
                                         "[[model.layers]]\ntype = \"block\"\nblock = \"a\"\n"),
                         "makes block 'a' contain itself (a -> b -> a)"));
    // A hostile count is refused before it allocates anything.
    EXPECT_TRUE(contains(config_error_of(with("block = \"pair\"\ncount = 2147483647\n")), "key 'model.layers[1].count' must be in [1, 100000]"));
    EXPECT_TRUE(contains(config_error_of("[model.blocks.x]\nlayers = [ { type = \"block\", block = \"y\", count = 1000 } ]\n"
                                         "[model.blocks.y]\nlayers = [ { type = \"relu\", enabled = false } ]\n"
                                         "[[model.layers]]\ntype = \"block\"\nblock = \"x\"\ncount = 1000\n"
                                         "[[model.layers]]\ntype = \"relu\"\n"),
                         "makes more than 100000 block instances"));
}

TEST(NetConfig, NameErrors) {
    EXPECT_TRUE(contains(config_error_of("[[model.layers]]\nname = \"a\"\ntype = \"relu\"\n[[model.layers]]\nname = \"a\"\ntype = \"relu\"\n"),
                         "key 'model.layers[1].name' is 'a', which another layer of the model has"));
    EXPECT_TRUE(contains(config_error_of("[[model.layers]]\nname = \"input\"\ntype = \"relu\"\n"),
                         "key 'model.layers[0].name' must be a non-empty name without dots, other than 'input'"));
    EXPECT_TRUE(contains(config_error_of("[[model.layers]]\nname = \"a.b\"\ntype = \"relu\"\n"), "without dots"));
    EXPECT_TRUE(contains(config_error_of("[[model.layers]]\ntype = \"relu\"\ninputs = []\n"),
                         "key 'model.layers[0].inputs' must name at least one layer"));
    EXPECT_TRUE(contains(config_error_of("[[model.layers]]\ntype = \"relu\"\nenabled = false\n"),
                         "key 'model.layers[0].enabled' is false on the model's last layer"));
}

// [model] inputs and outputs: the first layer reads the first input; layers name the others;
// the names are checked where they are written.
TEST(NetConfig, SeveralInputsAndOutputs) {
    const std::string text = R"(
[model]
inputs = ["ids", "mask"]
outputs = ["head", "h"]
[[model.layers]]
type = "linear"
name = "h"
out = 4
[[model.layers]]
type = "add"
name = "s"
inputs = ["h", "mask"]
[[model.layers]]
type = "linear"
name = "head"
out = 2
)";
    const RunConfig c = parse_config(text, "test.toml");
    EXPECT_EQ(c.model_inputs, (std::vector<std::string>{"ids", "mask"}));
    EXPECT_EQ(c.model_outputs, (std::vector<std::string>{"head", "h"}));
    EXPECT_EQ(describe(wiring(text)), "h(linear)<-ids\ns(add)<-h,mask\nhead(linear)<-s\n");
    EXPECT_TRUE(parse_config("[[model.layers]]\ntype = \"relu\"\n", "t.toml").model_inputs.empty());
    EXPECT_TRUE(contains(config_error_of("[model]\ninputs = []\n"), "key 'model.inputs' must name 1 to 256 model inputs"));
    EXPECT_TRUE(contains(config_error_of("[model]\ninputs = [\"a\", \"a\"]\n"), "key 'model.inputs' names 'a' twice"));
    EXPECT_TRUE(contains(config_error_of("[model]\ninputs = [\"a.b\"]\n"), "key 'model.inputs' holds 'a.b'"));
    EXPECT_TRUE(contains(config_error_of("[model]\ninputs = [\"x\"]\n[[model.layers]]\nname = \"x\"\ntype = \"relu\"\n"),
                         "key 'model.layers[0].name' is 'x', which names a model input (model.inputs)"));
    EXPECT_TRUE(contains(config_error_of("[model]\noutputs = [\"a\", \"a\"]\n"), "key 'model.outputs' names 'a' twice"));
    EXPECT_TRUE(contains(config_error_of("[model]\noutputs = 3\n"), "model.outputs"));
    std::string many = "[model]\noutputs = [";
    for (int k = 0; k <= 256; ++k) many += (k ? ", \"o" : "\"o") + std::to_string(k) + "\"";
    EXPECT_TRUE(contains(config_error_of(many + "]\n"), "key 'model.outputs' must name 1 to 256 layers (got 257)"));
}

}  // namespace
}  // namespace xylem::test
