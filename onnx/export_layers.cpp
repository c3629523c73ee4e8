// The exporter's table: each xylem layer type and the ONNX nodes (opset 17) it becomes, one
// function per type. Options come from the layer's spec (the config), weights from the model.
// lstm and gru are in export_recurrent.cpp.
#include <cmath>

#include "export_graph.h"
#include "xylem/error.h"
#include "xylem/layers/batchnorm.h"
#include "xylem/layers/clamp.h"
#include "xylem/layers/conv.h"
#include "xylem/layers/elementwise.h"
#include "xylem/layers/linear.h"
#include "xylem/layers/merge.h"
#include "xylem/layers/registry.h"
#include "xylem/layers/reshape.h"
#include "xylem/layers/slice.h"
#include "xylem/layers/transformer.h"

namespace xylem::onnx_export::detail {

void emit_linear(GraphWriter& w, const LayerView& v, const std::string& suffix, const std::string& x,
                 size_t sample_rank, const std::string& bias, const std::string& output) {
    using G = GraphWriter;
    Shape shape;  // [out, in]
    const std::vector<float> weight = v.param(suffix, &shape);
    const std::string name = v.name + "." + suffix;
    if (sample_rank == 1) {  // [N, in]: one Gemm with the weight as it is stored
        std::vector<std::string> in{x, w.floats(name, shape, weight)};
        if (!bias.empty()) in.push_back(bias);
        w.node_to(output, v.name, "Gemm", in, {G::i("transB", 1)});
        return;
    }
    // [N, ..., in]: Gemm takes matrices only; MatMul broadcasts over the leading axes.
    const int64_t out = shape.at(0), in = shape.at(1);
    std::vector<float> wt(weight.size());
    for (int64_t r = 0; r < out; ++r)
        for (int64_t c = 0; c < in; ++c) wt[static_cast<size_t>(c * out + r)] = weight[static_cast<size_t>(r * in + c)];
    const std::string node_layer = suffix == "weight" ? v.name : v.name + "/" + suffix.substr(0, suffix.find('.'));
    const std::string wname = w.floats(name, {in, out}, wt);
    if (bias.empty()) return w.node_to(output, node_layer, "MatMul", {x, wname});
    const std::string y = w.node(node_layer, "MatMul", {x, wname});
    w.node_to(output, node_layer, "Add", {y, bias});
}

std::string extent_of(GraphWriter& w, const std::string& layer, const std::string& x, int64_t axis) {
    return w.node(layer, "Shape", {x}, {GraphWriter::i("start", axis), GraphWriter::i("end", axis + 1)});
}

namespace {
using G = GraphWriter;

// The initializer of a parameter, under its xylem name ("" when the layer has none of that name).
std::string init_param(GraphWriter& w, const LayerView& v, const std::string& suffix) {
    if (!v.has_param(suffix)) return "";
    Shape shape;
    std::vector<float> values = v.param(suffix, &shape);
    return w.floats(v.param_name(suffix), shape, values);
}

std::string scalar(GraphWriter& w, const LayerView& v, const std::string& what, float value) {
    return w.floats(v.name + "/" + what, {}, {value});
}

std::string one_op(GraphWriter& w, const LayerView& v, const char* op, std::vector<G::Attr> attrs = {}) {
    w.node_to(v.output, v.name, op, {v.inputs.at(0)}, std::move(attrs));
    return v.output;
}

std::string linear(GraphWriter& w, const LayerView& v) {
    emit_linear(w, v, "weight", v.inputs.at(0), v.input_samples.at(0).size(), init_param(w, v, "bias"), v.output);
    return v.output;
}

std::string conv2d(GraphWriter& w, const LayerView& v) {
    const auto& o = layer_options<Conv2dOptions>(*v.spec);
    std::vector<std::string> in{v.inputs.at(0), init_param(w, v, "weight")};
    if (o.bias) in.push_back(init_param(w, v, "bias"));
    w.node_to(v.output, v.name, "Conv", in,
              {G::ints("kernel_shape", {o.kernel_h, o.kernel_w}), G::ints("strides", {o.stride, o.stride}),
               G::ints("pads", {o.padding, o.padding, o.padding, o.padding}),
               G::ints("dilations", {o.dilation, o.dilation}), G::i("group", o.groups)});
    return v.output;
}

std::string pool(GraphWriter& w, const LayerView& v, bool max) {
    const Pool2dOptions& o = layer_options<Pool2dConfig>(*v.spec).pool;
    const int64_t stride = o.stride ? o.stride : o.kernel;  // stride 0: the kernel
    std::vector<G::Attr> attrs{G::ints("kernel_shape", {o.kernel, o.kernel}), G::ints("strides", {stride, stride}),
                               G::ints("pads", {o.padding, o.padding, o.padding, o.padding})};
    if (!max) attrs.push_back(G::i("count_include_pad", o.count_include_pad ? 1 : 0));
    return one_op(w, v, max ? "MaxPool" : "AveragePool", attrs);
}

std::string global_avgpool(GraphWriter& w, const LayerView& v) {
    // ONNX keeps [N, C, 1, 1]; xylem's layer gives [N, C].
    const std::string pooled = w.node(v.name, "GlobalAveragePool", {v.inputs.at(0)});
    w.node_to(v.output, v.name, "Flatten", {pooled}, {G::i("axis", 1)});
    return v.output;
}

std::string reshape(GraphWriter& w, const LayerView& v) {
    Shape target{-1};  // the batch, then the resolved per-sample shape
    target.insert(target.end(), v.output_sample.begin(), v.output_sample.end());
    const std::string shape = w.int64s(v.name + "/shape", {static_cast<int64_t>(target.size())}, target);
    w.node_to(v.output, v.name, "Reshape", {v.inputs.at(0), shape});
    return v.output;
}

std::string transpose(GraphWriter& w, const LayerView& v) {
    std::vector<int64_t> perm{0};  // the batch stays first; the layer's perm is over the sample's axes
    for (int64_t p : layer_options<TransposeOptions>(*v.spec).perm) perm.push_back(p + 1);
    w.node_to(v.output, v.name, "Transpose", {v.inputs.at(0)}, {G::ints("perm", std::move(perm))});
    return v.output;
}

std::string gelu(GraphWriter& w, const LayerView& v) {
    const std::string& x = v.inputs.at(0);
    if (!layer_options<GeluOptions>(*v.spec).tanh) {  // 0.5 x (1 + erf(x / sqrt 2)), torch's Erf form
        const std::string e =
            w.node(v.name, "Erf", {w.node(v.name, "Div", {x, scalar(w, v, "sqrt2", std::sqrt(2.0f))})});
        const std::string xe = w.node(v.name, "Mul", {x, w.node(v.name, "Add", {e, scalar(w, v, "one", 1.0f)})});
        w.node_to(v.output, v.name, "Mul", {xe, scalar(w, v, "half", 0.5f)});
        return v.output;
    }
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's
    const std::string x3 = w.node(v.name, "Mul", {w.node(v.name, "Mul", {x, x}), x});
    const std::string inner = w.node(v.name, "Add", {x, w.node(v.name, "Mul", {x3, scalar(w, v, "c", 0.044715f)})});
    const float k = static_cast<float>(std::sqrt(2.0 / 3.14159265358979323846));
    const std::string t = w.node(v.name, "Tanh", {w.node(v.name, "Mul", {inner, scalar(w, v, "sqrt_2_over_pi", k)})});
    const std::string xh = w.node(v.name, "Mul", {x, scalar(w, v, "half", 0.5f)});
    w.node_to(v.output, v.name, "Mul", {xh, w.node(v.name, "Add", {t, scalar(w, v, "one", 1.0f)})});
    return v.output;
}

std::string clamp(GraphWriter& w, const LayerView& v) {
    const auto& o = layer_options<ClampOptions>(*v.spec);
    // Clip's min and max are optional inputs: an infinite bound is left out ("").
    w.node_to(v.output, v.name, "Clip",
              {v.inputs.at(0), std::isinf(o.lo) ? "" : scalar(w, v, "min", o.lo),
               std::isinf(o.hi) ? "" : scalar(w, v, "max", o.hi)});
    return v.output;
}

std::string slice(GraphWriter& w, const LayerView& v) {
    const auto& o = layer_options<SliceOptions>(*v.spec);  // Python's bounds, as ONNX's Slice takes them
    w.node_to(v.output, v.name, "Slice",
              {v.inputs.at(0), w.int64s(v.name + "/starts", {1}, {o.start}), w.int64s(v.name + "/ends", {1}, {o.end}),
               w.int64s(v.name + "/axes", {1}, {o.axis})});
    return v.output;
}

std::string batchnorm(GraphWriter& w, const LayerView& v) {
    const auto& o = layer_options<BatchNormOptions>(*v.spec);
    w.node_to(v.output, v.name, "BatchNormalization",
              {v.inputs.at(0), init_param(w, v, "weight"), init_param(w, v, "bias"), init_param(w, v, "running_mean"),
               init_param(w, v, "running_var")},
              {G::f("epsilon", o.eps), G::f("momentum", 1.0f - o.momentum)});  // ONNX's momentum is 1 - PyTorch's
    return v.output;
}

// Add, Sub or Mul: xylem's add, sub and mul broadcast their second input over the first's leading axes.
std::string merge2(GraphWriter& w, const LayerView& v, const char* op) {
    std::string b = v.inputs.at(1);
    const size_t ra = v.input_samples.at(0).size(), rb = v.input_samples.at(1).size();
    if (rb < ra) {  // b is a's trailing part per sample: ONNX broadcasts from the right, so b's batch needs new axes
                    // after it
        Shape axes;
        for (size_t k = 1; k <= ra - rb; ++k) axes.push_back(static_cast<int64_t>(k));
        b = w.node(v.name, "Unsqueeze", {b, w.int64s(v.name + "/axes", {static_cast<int64_t>(axes.size())}, axes)});
    }
    w.node_to(v.output, v.name, op, {v.inputs.at(0), b});  // a [C, 1, 1] b of a [C, H, W]: ONNX broadcasts it as is
    return v.output;
}

std::string add(GraphWriter& w, const LayerView& v) { return merge2(w, v, "Add"); }
std::string sub(GraphWriter& w, const LayerView& v) { return merge2(w, v, "Sub"); }
std::string mul(GraphWriter& w, const LayerView& v) { return merge2(w, v, "Mul"); }

std::string concat(GraphWriter& w, const LayerView& v) {
    w.node_to(v.output, v.name, "Concat", v.inputs, {G::i("axis", layer_options<ConcatOptions>(*v.spec).axis)});
    return v.output;
}

std::string embedding(GraphWriter& w, const LayerView& v) {
    w.node_to(v.output, v.name, "Gather", {init_param(w, v, "weight"), v.inputs.at(0)}, {G::i("axis", 0)});
    return v.output;
}

std::string one_hot(GraphWriter& w, const LayerView& v) {
    const int64_t vocab = v.output_sample.back();  // [.., vocab]: one row of the identity per token
    std::vector<float> eye(static_cast<size_t>(vocab * vocab), 0.0f);
    for (int64_t k = 0; k < vocab; ++k) eye[static_cast<size_t>(k * vocab + k)] = 1.0f;
    const std::string table = w.floats(v.name + ".identity", {vocab, vocab}, eye);
    w.node_to(v.output, v.name, "Gather", {table, v.inputs.at(0)}, {G::i("axis", 0)});
    return v.output;
}

std::string layer_norm(GraphWriter& w, const LayerView& v) {
    const auto& o = layer_options<LayerNormOptions>(*v.spec);
    std::vector<std::string> in{v.inputs.at(0), init_param(w, v, "weight")};
    if (o.bias) in.push_back(init_param(w, v, "bias"));
    w.node_to(v.output, v.name, "LayerNormalization", in, {G::i("axis", -1), G::f("epsilon", o.eps)});
    return v.output;
}

std::string position_embedding(GraphWriter& w, const LayerView& v) {
    // y[b, t] = x[b, t] + table[t]: the table's first T rows, T read from x.
    const std::string& x = v.inputs.at(0);
    const int64_t max_len = layer_options<PositionEmbeddingOptions>(*v.spec).max_len;
    if (v.input_samples.at(0).at(0) > max_len)
        v.refuse("its input has " + std::to_string(v.input_samples.at(0).at(0)) + " positions, its table " +
                 std::to_string(max_len) + " (max_len)");
    const std::string rows = w.node(v.name, "Slice",
                                    {init_param(w, v, "weight"), w.int64s(v.name + "/starts", {1}, {0}),
                                     extent_of(w, v.name, x, 1), w.int64s(v.name + "/axes", {1}, {0})});
    w.node_to(v.output, v.name, "Add", {x, rows});
    return v.output;
}

// The additive causal mask of every attention layer: [P, P], -inf above the diagonal, P the
// model's longest sequence; each layer slices its [T, T] corner.
std::string causal_mask(GraphWriter& w, int64_t positions) {
    const std::string name = "causal_mask";
    if (w.has_initializer(name)) return name;
    std::vector<float> m(static_cast<size_t>(positions * positions), 0.0f);
    for (int64_t r = 0; r < positions; ++r)
        for (int64_t c = r + 1; c < positions; ++c) m[static_cast<size_t>(r * positions + c)] = -INFINITY;
    return w.floats(name, {positions, positions}, m);
}

std::string attention(GraphWriter& w, const LayerView& v) {
    const auto& o = layer_options<AttentionOptions>(*v.spec);
    const std::string& x = v.inputs.at(0);
    const Shape& s = v.input_samples.at(0);  // [T, C]
    const int64_t t = s.at(0), c = s.at(1), h = o.heads, d = c / h;
    const std::string& n = v.name;
    const std::string attn = n + "/c_attn";
    const std::string qkv_b = w.fresh(attn + ":0");
    emit_linear(w, v, "c_attn.weight", x, 2, o.bias ? init_param(w, v, "c_attn.bias") : "", qkv_b);
    // q, k, v: [B, T, C] each, then heads [B, H, T, D] (k as [B, H, D, T]), as nanoGPT's view + transpose.
    const std::vector<std::string> parts{w.fresh(n + "/q"), w.fresh(n + "/k"), w.fresh(n + "/v")};
    w.node_outputs(parts, n, "Split", {qkv_b, w.int64s(n + "/split", {3}, {c, c, c})}, {G::i("axis", 2)});
    const std::string heads_shape = w.int64s(n + "/heads_shape", {4}, {0, 0, h, d});
    auto heads = [&](const std::string& p, std::vector<int64_t> perm) {
        return w.node(n, "Transpose", {w.node(n, "Reshape", {p, heads_shape})}, {G::ints("perm", std::move(perm))});
    };
    const std::string q = heads(parts[0], {0, 2, 1, 3}), kt = heads(parts[1], {0, 2, 3, 1}),
                      val = heads(parts[2], {0, 2, 1, 3});
    std::string scores = w.node(
        n, "Mul", {w.node(n, "MatMul", {q, kt}), scalar(w, v, "scale", 1.0f / std::sqrt(static_cast<float>(d)))});
    if (o.causal) {
        const int64_t positions = std::max(v.max_positions, t);
        const std::string te = extent_of(w, n, x, 1);
        const std::string ends = w.node(n, "Concat", {te, te}, {G::i("axis", 0)});
        const std::string mask = w.node(n, "Slice",
                                        {causal_mask(w, positions), w.int64s(n + "/mask_starts", {2}, {0, 0}), ends,
                                         w.int64s(n + "/mask_axes", {2}, {0, 1})});
        scores = w.node(n, "Add", {scores, mask});
    }
    const std::string probs = w.node(n, "Softmax", {scores}, {G::i("axis", -1)});
    const std::string merged =
        w.node(n, "Reshape",
               {w.node(n, "Transpose", {w.node(n, "MatMul", {probs, val})}, {G::ints("perm", {0, 2, 1, 3})}),
                w.int64s(n + "/merged_shape", {3}, {0, 0, c})});
    emit_linear(w, v, "c_proj.weight", merged, 2, o.bias ? init_param(w, v, "c_proj.bias") : "", v.output);
    return v.output;
}

std::vector<Mapping> table() {
    std::vector<Mapping> t = {
        {"linear",
         "Gemm (transB = 1) for [N, in]; for [N, ..., in] MatMul (the weight stored transposed, [in, out]) and Add",
         linear},
        {"conv2d", "Conv", conv2d},
        {"batchnorm", "BatchNormalization (inference: running statistics; momentum 1 - xylem's)", batchnorm},
        {"maxpool2d", "MaxPool", [](GraphWriter& w, const LayerView& v) { return pool(w, v, true); }},
        {"avgpool2d", "AveragePool (count_include_pad as the layer's)",
         [](GraphWriter& w, const LayerView& v) { return pool(w, v, false); }},
        {"global_avgpool", "GlobalAveragePool, Flatten", global_avgpool},
        {"flatten", "Flatten (axis 1)",
         [](GraphWriter& w, const LayerView& v) { return one_op(w, v, "Flatten", {G::i("axis", 1)}); }},
        {"reshape", "Reshape ([-1, per-sample shape])", reshape},
        {"transpose", "Transpose (0, then the layer's perm plus 1)", transpose},
        {"relu", "Relu", [](GraphWriter& w, const LayerView& v) { return one_op(w, v, "Relu"); }},
        {"sigmoid", "Sigmoid", [](GraphWriter& w, const LayerView& v) { return one_op(w, v, "Sigmoid"); }},
        {"tanh", "Tanh", [](GraphWriter& w, const LayerView& v) { return one_op(w, v, "Tanh"); }},
        {"clamp", "Clip (an infinite bound left out)", clamp},
        {"relu6", "Clip (min 0, max 6)",
         [](GraphWriter& w, const LayerView& v) {
             w.node_to(v.output, v.name, "Clip", {v.inputs.at(0), scalar(w, v, "min", 0.0f), scalar(w, v, "max", 6.0f)});
             return v.output;
         }},
        {"gelu", "Div (sqrt 2), Erf, Add 1, Mul x, Mul 0.5; approximate = \"tanh\": its Mul/Add/Tanh form", gelu},
        {"softmax", "Softmax (axis -1)",
         [](GraphWriter& w, const LayerView& v) { return one_op(w, v, "Softmax", {G::i("axis", -1)}); }},
        {"log_softmax", "LogSoftmax (axis -1)",
         [](GraphWriter& w, const LayerView& v) { return one_op(w, v, "LogSoftmax", {G::i("axis", -1)}); }},
        {"dropout", "nothing (inference)", [](GraphWriter&, const LayerView&) { return std::string(); }},
        {"add", "Add (Unsqueeze of the second input when it is the first's trailing part)", add},
        {"sub", "Sub (as add)", sub},
        {"mul", "Mul (as add)", mul},
        {"concat", "Concat (the layer's axis)", concat},
        {"slice", "Slice (one axis; start and end as the layer's)", slice},
        {"bias", "Add of the weight (numpy broadcasting: the weight is the samples' trailing axes)",
         [](GraphWriter& w, const LayerView& v) {
             w.node_to(v.output, v.name, "Add", {v.inputs.at(0), init_param(w, v, "weight")});
             return v.output;
         }},
        {"scale", "Mul by the weight (broadcast as bias's)",
         [](GraphWriter& w, const LayerView& v) {
             w.node_to(v.output, v.name, "Mul", {v.inputs.at(0), init_param(w, v, "weight")});
             return v.output;
         }},
        {"embedding", "Gather (axis 0) of the weight by the int64 token indices", embedding},
        {"one_hot", "Gather (axis 0) of a [vocab, vocab] identity initializer `<layer>.identity`", one_hot},
        {"layer_norm", "LayerNormalization (axis -1)", layer_norm},
        {"position_embedding", "Add of a Slice of the table (its first T rows, T from Shape)", position_embedding},
        {"attention",
         "MatMul + Add (c_attn, as linear's), Split, Reshape + Transpose per q/k/v, MatMul, Mul (1/sqrt(D)), Add of a "
         "Slice of the "
         "[P, P] causal mask `causal_mask` (-inf above the diagonal, P the model's max positions), Softmax, MatMul, "
         "Transpose, Reshape, MatMul + Add (c_proj)",
         attention},
    };
    for (Mapping& m : recurrent_mappings()) t.push_back(std::move(m));
    return t;
}
}  // namespace

const std::vector<Mapping>& mappings() {
    static const std::vector<Mapping> t = table();
    return t;
}

}  // namespace xylem::onnx_export::detail
