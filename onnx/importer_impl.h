// The importer's internals, shared by its files: importer.cpp (the checks before any work, the
// walk, the public functions), fold.cpp (constant folding of shape subgraphs) and ops.cpp (the
// ops that become layers). Internal to xylem_onnx.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tensors.h"
#include "xylem/error.h"
#include "xylem/onnx/importer.h"

namespace xylem::onnx_import::detail {

// Stands for the batch size in folded shape values when the file leaves it symbolic: Shape(x)[0].
constexpr int64_t kBatchMark = 0x5EB0000001LL;

inline std::string shape_text(const std::vector<int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i)
        t += (i ? ", " : "") + (s[i] == kBatchMark ? std::string("N") : std::to_string(s[i]));
    return t + "]";
}

// A tensor inside a pattern that becomes one fused layer once it is whole (patterns.cpp): torch's
// layer norm below opset 17 (ln.*), GELU's erf form (gelu.*), attention (attn.*). Nothing but the
// pattern's next node may read it.
struct Pending {
    std::string kind;     // "" for none
    std::string of;       // the ONNX tensor the pattern reads (attention: the q, k, v linear's output)
    float eps = 0;        // ln: the epsilon added to the variance
    int part = -1;        // attn: q 0, k 1, v 2
    int64_t heads = 0;    // attn
    double scale = 1;     // attn: the factor on q k^T
    bool causal = false;  // attn: the upper triangle masked
};

// A tensor during the walk: a constant (folded), or the output of a layer (or the model input).
struct Value {
    bool is_const = false;
    HostTensor c;
    std::string node;            // the xylem node that produces it (or the model input's name)
    std::vector<int64_t> shape;  // ONNX's full shape; shape[0] is the batch
    bool squeezed = false;       // global_avgpool's [N, C] standing for ONNX's [N, C, 1, 1]
    int64_t pad = 0;             // a zero Pad of H and W still to fold into the Conv or AveragePool reading it
    // Zeros of `shape` whose shape holds the batch (ConstantOfShape of a folded Shape: torch's
    // initial LSTM states), so no constant can hold them; only an LSTM's initial state reads them.
    bool zeros = false;
    // How ONNX's tensor (`shape`) lies over the xylem node's [N, T, ...] output: kBatchMajor as
    // it is; kTimeMajor ONNX's [T, N, ...] (axes 0 and 1 swapped: torch's LSTM input); kLstmY an
    // LSTM's (or GRU's) Y, [T, 1, N, H]. Only Transpose, Squeeze, LSTM and GRU read the last two.
    enum Layout { kBatchMajor, kTimeMajor, kLstmY } layout = kBatchMajor;
    Pending pending;
};

struct LayerOut {
    std::string type, name;
    std::vector<std::string> inputs;
    std::vector<std::pair<std::string, std::string>> keys;  // TOML values, written as they stand
};

inline std::string toml_float(double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.9g", v);
    std::string s = b;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
}

inline std::string toml_ints(const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

inline std::string toml_string(const std::string& v) {
    std::string s = "\"";
    for (char ch : v) {
        if (ch == '"' || ch == '\\') s += '\\';
        s += ch;
    }
    return s + "\"";
}

// A layer name a config, a checkpoint and a shell all take: letters, digits, '_' and '-' (a
// config's layer names have no dots: those separate a block's instances). torch's module path
// "layer1.0.conv1" becomes "layer1_0_conv1"; its parameters "layer1_0_conv1.weight".
inline std::string clean_name(const std::string& raw) {
    std::string s;
    for (char ch : raw) {
        const bool ok = std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
        if (!ok && (s.empty() || s.back() == '_')) continue;  // no leading or doubled separators
        s += ok ? ch : '_';
    }
    while (!s.empty() && s.back() == '_') s.pop_back();
    return s;
}

inline int64_t normalize_axis(int64_t axis, size_t rank, const std::function<void(const std::string&)>& fail) {
    const int64_t r = static_cast<int64_t>(rank);
    if (axis < -r || axis >= r) fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
    return axis < 0 ? axis + r : axis;
}

class Importer {
public:
    Importer(const onnx::ModelProto& model, std::string source, std::string dir)
        : m_(model), g_(model.graph()), source_(std::move(source)), dir_(std::move(dir)) {}

    Imported run();

    // The importer's one table (importer.cpp): every op it reads, what it becomes (docs/onnx.md's
    // table, supported_ops()), and the handler of a node on the model's data (null: the op is
    // only folded on constants or taken by a pattern).
    struct OpEntry {
        const char* op;
        const char* becomes;
        void (*handle)(Importer&, const onnx::NodeProto&);
    };
    static const std::vector<OpEntry>& table();

private:
    // Checks before any work.
    void check_opset();
    void check_ops() const;
    void check_structure();
    void decode_initializers();
    void read_inputs();
    void read_input(const onnx::ValueInfoProto& in, const std::string& node, bool first);
    // The xylem name of a model input (Imported::inputs' node), and whether it holds token ids.
    bool is_model_input(const std::string& node) const;
    bool is_token_input(const std::string& node) const;
    std::string output_node(const std::string& output);  // run(): the node giving graph output `output`
    // The walk.
    void visit(const onnx::NodeProto& n);
    void fold(const onnx::NodeProto& n);
    // `pad_ok`: the reader folds a pending zero Pad into its own padding (Conv, AveragePool).
    std::string use(const std::string& tensor, const onnx::NodeProto& reader, bool pad_ok = false);
    const Value& value(const std::string& tensor) const {
        auto it = values_.find(tensor);
        if (it == values_.end()) throw Error(source_ + ": tensor '" + tensor + "' is read before anything makes it");
        return it->second;
    }
    // Input k of node n: an Error naming the node when it has none (never an out-of-range read).
    const std::string& input_of(const onnx::NodeProto& n, int k) const {
        if (k >= n.input_size() || n.input(k).empty()) refuse(n, "has no input " + std::to_string(k));
        return n.input(k);
    }
    const HostTensor& constant(const onnx::NodeProto& n, size_t input, const char* what) const;
    std::string layer_name(const onnx::NodeProto& n, const std::string& weight);
    std::string emit(LayerOut l, const onnx::NodeProto& n, std::vector<int64_t> shape, const std::string& output);
    void param(const std::string& layer, const std::string& name, Shape shape, std::vector<float> v);
    [[noreturn]] void refuse(const onnx::NodeProto& n, const std::string& why) const;
    std::string label(const onnx::NodeProto& n) const;

    // Attributes, type-checked.
    const onnx::AttributeProto* attr(const onnx::NodeProto& n, const char* name, int type) const;
    int64_t attr_int(const onnx::NodeProto& n, const char* name, int64_t dflt) const;
    // ONNX Reshape's rule for an input of known dims `in`: a 0 copies the input's axis (unless
    // allowzero: then it is an empty axis, refused where !allow_empty), one -1 is inferred, every
    // entry in range, and the result holds exactly the input's elements. Messages quote `named`
    // (the node's whole shape). Folding (fold.cpp) uses it on constants; the data path (ops.cpp,
    // reshape) on each sample's axes after its batch rule.
    std::vector<int64_t> reshape_dims(const onnx::NodeProto& n, const std::vector<int64_t>& shape,
                                      const std::vector<int64_t>& in, bool allowzero, bool allow_empty,
                                      const std::vector<int64_t>& named) const;
    float attr_float(const onnx::NodeProto& n, const char* name, float dflt) const;
    std::string attr_string(const onnx::NodeProto& n, const char* name, const std::string& dflt) const;
    std::vector<int64_t> attr_ints(const onnx::NodeProto& n, const char* name, std::vector<int64_t> dflt) const;
    void check_known_attrs(const onnx::NodeProto& n, std::initializer_list<const char*> known) const;

    // The ops (ops.cpp).
    void skip(const onnx::NodeProto& n);  // Identity, Dropout
    void cast(const onnx::NodeProto& n);
    void activation(const onnx::NodeProto& n);  // Relu, Sigmoid, Tanh
    void softmax(const onnx::NodeProto& n);     // Softmax, LogSoftmax
    void global_avgpool(const onnx::NodeProto& n);
    void flatten(const onnx::NodeProto& n);
    void reshape(const onnx::NodeProto& n);
    void squeeze(const onnx::NodeProto& n);  // Squeeze, Unsqueeze
    void concat(const onnx::NodeProto& n);
    void conv(const onnx::NodeProto& n);
    void gemm(const onnx::NodeProto& n);
    void matmul(const onnx::NodeProto& n);
    void add(const onnx::NodeProto& n);
    void sub(const onnx::NodeProto& n);
    void mul(const onnx::NodeProto& n);
    void merge2(const onnx::NodeProto& n, const std::string& type);  // add, sub and mul of two layer outputs
    void batchnorm(const onnx::NodeProto& n);
    void pool(const onnx::NodeProto& n, bool max);
    void pad(const onnx::NodeProto& n);
    void clip(const onnx::NodeProto& n);
    void hard_sigmoid(const onnx::NodeProto& n);  // HardSigmoid, HardSwish
    // A layer inside what one node becomes (not its output): named after the node plus `suffix`.
    std::string inner_layer(const onnx::NodeProto& n, const std::string& suffix, LayerOut l, std::vector<int64_t> shape);
    // Add, Sub, Mul or Div of a constant and the model's data -> bias or scale; false when no
    // operand is a constant.
    bool constant_op(const onnx::NodeProto& n);
    // Patterns that become fused layers, and embeddings (patterns.cpp): true when the node was
    // taken (as a step of a pattern or a whole layer), false to leave it to the other handlers.
    bool pattern(const onnx::NodeProto& n);
    bool layer_norm_step(const onnx::NodeProto& n);
    bool gelu_step(const onnx::NodeProto& n);
    bool attention_step(const onnx::NodeProto& n);
    bool embedding_step(const onnx::NodeProto& n);
    void layer_norm(const onnx::NodeProto& n, const std::string& x, float eps, const HostTensor* weight,
                    const HostTensor* bias, const std::string& output, const std::string& weight_name);
    void attention(const onnx::NodeProto& n, const Pending& p, const std::string& merged);
    // The one node reading `tensor` (its index), or -1 when none or several do.
    int sole_reader(const std::string& tensor) const;
    // Sequences (sequence.cpp).
    void recurrent(const onnx::NodeProto& n, bool gru);  // LSTM or GRU
    void transpose(const onnx::NodeProto& n);
    void constant_of_shape(const onnx::NodeProto& n);
    void slice(const onnx::NodeProto& n);
    void gather_data(const onnx::NodeProto& n);
    // Slice's starts, ends, axes and steps (opset 10 on: inputs) over a tensor of `dims`: per axis
    // [begin, end), step 1 only. An Error naming the node for anything else.
    std::vector<std::pair<int64_t, int64_t>> slice_ranges(const onnx::NodeProto& n, const std::vector<int64_t>& dims);
    void reshape_like(const onnx::NodeProto& n, const std::vector<int64_t>& out_shape, const std::string& input);

    const onnx::ModelProto& m_;
    const onnx::GraphProto& g_;
    std::string source_, dir_;
    Imported out_;
    std::map<std::string, int> producer_;  // tensor -> node index
    std::map<std::string, int> readers_;   // tensor -> how many node inputs (and graph outputs) read it
    std::map<std::string, const onnx::TensorProto*> initializers_;
    std::vector<int> order_;  // topological, live nodes only
    std::map<std::string, Value> values_;
    std::vector<LayerOut> layers_;
    std::map<std::string, std::vector<int64_t>> layer_shapes_;  // xylem node -> ONNX full shape of its output
    std::set<std::string> names_;
    std::set<int> absorbed_;                           // Add nodes that became a linear layer's bias
    std::map<std::string, std::string> unsqueezed_;    // global_avgpool node -> its [C, 1, 1] reshape
    std::map<std::string, std::string> materialized_;  // a GELU's first step read elsewhere -> its scale layer
    int folded_ = 0;
    int current_ = -1;  // the node visit() works on
};

}  // namespace xylem::onnx_import::detail
