// The exporter's lstm and gru: one ONNX LSTM or GRU node per level of the stack, time-major.
// xylem's layers are batch-first ([B, T, F], PyTorch's batch_first = True) and ONNX Runtime runs
// only layout 0 ([T, B, F]), so the input is transposed once, each level's Y [T, 1, B, H] is
// squeezed to [T, B, H] for the next, and the top level's is transposed back to [B, T, H]. The
// state starts at zero, as a fresh xylem model's (or one after reset_state) does.
#include "export_graph.h"
#include "xylem/error.h"

namespace xylem::onnx_export::detail {
namespace {
using G = GraphWriter;

// PyTorch's gate blocks (rows of H) reordered to ONNX's: LSTM i f g o -> i o f c; GRU r z n -> z r h.
const std::vector<int> kLstmOrder = {0, 3, 1, 2};
const std::vector<int> kGruOrder = {1, 0, 2};

std::vector<float> reorder_gates(const std::vector<float>& rows, int64_t hidden, int64_t width,
                                 const std::vector<int>& order) {
    std::vector<float> out;
    out.reserve(rows.size());
    const size_t block = static_cast<size_t>(hidden * width);
    for (int g : order) out.insert(out.end(), rows.begin() + g * block, rows.begin() + (g + 1) * block);
    return out;
}

std::string recurrent(GraphWriter& w, const LayerView& v, bool lstm) {
    const Shape& s = v.input_samples.at(0);  // [T, F]
    if (s.size() != 2) v.refuse("expects [time, features] per sample, got " + to_string(s));
    const std::vector<int>& order = lstm ? kLstmOrder : kGruOrder;
    const int64_t gates = static_cast<int64_t>(order.size()), hidden = v.output_sample.back();
    std::string x = w.node(v.name, "Transpose", {v.inputs.at(0)}, {G::ints("perm", {1, 0, 2})});  // [T, B, F]
    const std::string axes = w.int64s(v.name + "/squeeze_axes", {1}, {1});
    for (int64_t level = 0; v.has_param("weight_ih_l" + std::to_string(level)); ++level) {
        const std::string l = std::to_string(level);
        Shape wih_shape;
        const std::vector<float> wih = v.param("weight_ih_l" + l, &wih_shape), whh = v.param("weight_hh_l" + l);
        const int64_t in = wih_shape.at(1);
        std::vector<float> b = reorder_gates(v.param("bias_ih_l" + l), hidden, 1, order);
        const std::vector<float> bhh = reorder_gates(v.param("bias_hh_l" + l), hidden, 1, order);
        b.insert(b.end(), bhh.begin(), bhh.end());  // ONNX's B: [Wb, Rb]
        const std::string W =
            w.floats(v.name + ".W_l" + l, {1, gates * hidden, in}, reorder_gates(wih, hidden, in, order));
        const std::string R =
            w.floats(v.name + ".R_l" + l, {1, gates * hidden, hidden}, reorder_gates(whh, hidden, hidden, order));
        const std::string B = w.floats(v.name + ".B_l" + l, {1, 2 * gates * hidden}, b);
        std::vector<G::Attr> attrs{G::i("hidden_size", hidden)};
        // PyTorch's (and xylem's) GRU applies r to W_hn h + b_hn: ONNX's linear_before_reset = 1.
        if (!lstm) attrs.push_back(G::i("linear_before_reset", 1));
        const std::string y = w.node(v.name, lstm ? "LSTM" : "GRU", {x, W, R, B}, attrs);  // [T, 1, B, H]
        x = w.node(v.name, "Squeeze", {y, axes});                                          // [T, B, H]
    }
    w.node_to(v.output, v.name, "Transpose", {x}, {G::ints("perm", {1, 0, 2})});
    return v.output;
}
}  // namespace

std::vector<Mapping> recurrent_mappings() {
    return {
        {"lstm",
         "Transpose to [T, B, F]; per level LSTM (gates reordered to i o f c: initializers `<layer>.W_l<k>`, "
         "`.R_l<k>`, `.B_l<k>`) and Squeeze of Y's direction axis; Transpose back to [B, T, H]",
         [](GraphWriter& w, const LayerView& v) { return recurrent(w, v, true); }},
        {"gru", "as lstm, with GRU (gates reordered to z r h, linear_before_reset = 1)",
         [](GraphWriter& w, const LayerView& v) { return recurrent(w, v, false); }},
    };
}

}  // namespace xylem::onnx_export::detail
