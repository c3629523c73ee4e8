// The ops that become layers: each node that computes on the model's data, checked against what
// the xylem layer can do, emitted as a [[model.layers]] table with its parameters (importer_impl.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "importer_impl.h"
#include "xylem/error.h"

namespace xylem::onnx_import::detail {

void Importer::conv(const onnx::NodeProto& n) {
    check_known_attrs(n, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
    const Value& x = value(input_of(n, 0));
    const HostTensor& w = constant(n, 1, "weight");
    if (x.shape.size() != 4 || w.dims.size() != 4) refuse(n, "xylem imports 2-D convolutions (NCHW) only");
    const int64_t group = attr_int(n, "group", 1);
    const int64_t c = x.shape[1];
    if (group < 1 || c % group || w.dims[0] % group || w.dims[1] * group != c)
        refuse(n, "weight " + shape_text(w.dims) + " does not fit input " + shape_text(x.shape) + " with group " +
                      std::to_string(group));
    const auto kernel = attr_ints(n, "kernel_shape", {w.dims[2], w.dims[3]});
    if (kernel != std::vector<int64_t>{w.dims[2], w.dims[3]}) refuse(n, "kernel_shape does not match the weight");
    const auto strides = attr_ints(n, "strides", {1, 1}), dil = attr_ints(n, "dilations", {1, 1});
    std::vector<int64_t> pads = attr_ints(n, "pads", {0, 0, 0, 0});
    const std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID")
        refuse(n, "auto_pad " + auto_pad + " has no xylem equivalent (give explicit pads)");
    if (auto_pad == "VALID") pads = {0, 0, 0, 0};
    if (strides.size() != 2 || strides[0] != strides[1] || strides[0] < 1)
        refuse(n, "strides " + shape_text(strides) + ": xylem's conv2d takes one stride for both axes");
    if (dil.size() != 2 || dil[0] != dil[1] || dil[0] < 1)
        refuse(n, "dilations " + shape_text(dil) + ": xylem's conv2d takes one dilation for both axes");
    if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3] || pads[0] != pads[1] || pads[0] < 0)
        refuse(n, "pads " + shape_text(pads) +
                      ": xylem's conv2d pads all four sides alike (asymmetric padding has no equivalent)");
    if (kernel[0] > INT32_MAX || strides[0] > INT32_MAX || dil[0] > INT32_MAX || pads[0] > INT32_MAX / 4)
        refuse(n, "attributes out of range");
    const int64_t padding = pads[0] + x.pad;  // a zero Pad before it, folded in (x.shape is the padded map)
    if (padding > INT32_MAX / 2) refuse(n, "padding out of range");
    const int64_t oh = (x.shape[2] + 2 * pads[0] - dil[0] * (kernel[0] - 1) - 1) / strides[0] + 1;
    const int64_t ow = (x.shape[3] + 2 * pads[0] - dil[0] * (kernel[1] - 1) - 1) / strides[0] + 1;
    if (oh < 1 || ow < 1) refuse(n, "its output would be empty for input " + shape_text(x.shape));
    const bool bias = n.input_size() > 2 && !n.input(2).empty();
    const std::string name = layer_name(n, input_of(n, 1));
    if (bias) {
        const HostTensor& b = constant(n, 2, "bias");
        if (b.dims != std::vector<int64_t>{w.dims[0]} || !b.is_float)
            refuse(n, "bias " + shape_text(b.dims) + " does not match the weight");
        param(name, "bias", {w.dims[0]}, b.f);
    }
    if (!w.is_float) refuse(n, "its weight is not float");
    param(name, "weight", w.dims, w.f);
    LayerOut l{"conv2d",
               name,
               {use(input_of(n, 0), n, true)},
               {{"out", std::to_string(w.dims[0])},
                {"kernel", toml_ints(kernel)},
                {"stride", std::to_string(strides[0])},
                {"padding", std::to_string(padding)},
                {"dilation", std::to_string(dil[0])},
                {"groups", std::to_string(group)},
                {"bias", bias ? "true" : "false"}}};
    emit(std::move(l), n, {x.shape[0], w.dims[0], oh, ow}, n.output(0));
}

void Importer::gemm(const onnx::NodeProto& n) {
    check_known_attrs(n, {"alpha", "beta", "transA", "transB"});
    const Value& a = value(input_of(n, 0));
    const HostTensor& b = constant(n, 1, "B");
    if (a.shape.size() != 2 || b.dims.size() != 2 || !b.is_float)
        refuse(n, "xylem imports Gemm of a [batch, features] input and a 2-D float B");
    if (attr_int(n, "transA", 0)) refuse(n, "transA = 1 (the batch along columns) has no xylem equivalent");
    const bool trans_b = attr_int(n, "transB", 0) != 0;
    const float alpha = attr_float(n, "alpha", 1), beta = attr_float(n, "beta", 1);
    const int64_t in = trans_b ? b.dims[1] : b.dims[0], out = trans_b ? b.dims[0] : b.dims[1];
    if (in != a.shape[1]) refuse(n, "B " + shape_text(b.dims) + " does not fit input " + shape_text(a.shape));
    const std::string name = layer_name(n, input_of(n, 1));
    std::vector<float> w(static_cast<size_t>(in * out));
    for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i)
            w[static_cast<size_t>(o * in + i)] = alpha * b.f[static_cast<size_t>(trans_b ? o * in + i : i * out + o)];
    param(name, "weight", {out, in}, std::move(w));
    const bool bias = n.input_size() > 2 && !n.input(2).empty();
    if (bias) {
        const HostTensor& c = constant(n, 2, "C");
        const bool vector = c.dims == std::vector<int64_t>{out} || c.dims == std::vector<int64_t>{1, out};
        if (!c.is_float || !vector)
            refuse(n, "C " + shape_text(c.dims) + ": xylem imports a bias of [out] or [1, out]");
        std::vector<float> bv = c.f;
        for (float& v : bv) v *= beta;
        param(name, "bias", {out}, std::move(bv));
    }
    LayerOut l{
        "linear", name, {use(input_of(n, 0), n)}, {{"out", std::to_string(out)}, {"bias", bias ? "true" : "false"}}};
    emit(std::move(l), n, {a.shape[0], out}, n.output(0));
}

void Importer::matmul(const onnx::NodeProto& n) {
    check_known_attrs(n, {});
    const Value& a = value(input_of(n, 0));
    const HostTensor& b = constant(n, 1, "B");
    if (b.dims.size() != 2 || !b.is_float) refuse(n, "xylem imports MatMul by a 2-D float initializer only");
    if (a.shape.size() < 2 || a.shape.size() > 3)
        refuse(n, "xylem's linear takes [batch, features] or [batch, steps, features]");
    const int64_t in = b.dims[0], out = b.dims[1];
    if (a.shape.back() != in) refuse(n, "B " + shape_text(b.dims) + " does not fit input " + shape_text(a.shape));
    const std::string name = layer_name(n, input_of(n, 1));
    std::vector<float> w(static_cast<size_t>(in * out));
    for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) w[static_cast<size_t>(o * in + i)] = b.f[static_cast<size_t>(i * out + o)];
    param(name, "weight", {out, in}, std::move(w));
    // MatMul then Add of a constant [out] (torch's nn.Linear on 3-D input, or without Gemm): one
    // linear layer with that bias, when the Add is the MatMul's one reader.
    std::string output = n.output(0);
    bool bias = false;
    if (readers_[output] == 1) {
        for (int j : order_) {
            const auto& add = g_.node(j);
            if (add.op_type() != "Add" || add.input_size() != 2) continue;
            const int k = add.input(0) == output ? 1 : add.input(1) == output ? 0 : -1;
            if (k < 0) continue;
            auto it = values_.find(add.input(k));
            if (it == values_.end() || !it->second.is_const) break;
            const HostTensor& c = it->second.c;
            if (!c.is_float || !(c.dims == std::vector<int64_t>{out} || c.dims == std::vector<int64_t>{1, out})) break;
            param(name, "bias", {out}, c.f);
            bias = true;
            absorbed_.insert(j);
            output = add.output(0);
            break;
        }
    }
    std::vector<int64_t> shape = a.shape;
    shape.back() = out;
    LayerOut l{
        "linear", name, {use(input_of(n, 0), n)}, {{"out", std::to_string(out)}, {"bias", bias ? "true" : "false"}}};
    emit(std::move(l), n, shape, output);
}

// Add, Sub or Mul of two layer outputs -> xylem's add, sub or mul, which broadcast their second
// input: for Add and Mul (symmetric) the operand with more elements per sample goes first; a Sub
// whose first operand is the smaller is refused.
void Importer::add(const onnx::NodeProto& n) { merge2(n, "add"); }
void Importer::sub(const onnx::NodeProto& n) { merge2(n, "sub"); }
void Importer::mul(const onnx::NodeProto& n) { merge2(n, "mul"); }

void Importer::merge2(const onnx::NodeProto& n, const std::string& type) {
    const bool mul = type == "mul";
    check_known_attrs(n, {});
    if (value(input_of(n, 0)).is_const || value(input_of(n, 1)).is_const)
        refuse(n, mul ? "multiplies by a constant the scale layer cannot hold"
                      : type == "sub" ? "subtracts a constant the bias layer cannot hold"
                                      : "adds a constant the bias layer cannot hold");  // constant_op took the ones it can
    auto per_sample = [&](const std::string& t) {
        int64_t k = 1;
        for (size_t i = 1; i < value(t).shape.size(); ++i) k *= value(t).shape[i];
        return k;
    };
    const bool swap = per_sample(n.input(1)) > per_sample(n.input(0));
    if (swap && type == "sub")
        refuse(n, "subtracts " + shape_text(value(n.input(1)).shape) + " from the smaller " +
                      shape_text(value(n.input(0)).shape) + "; xylem's sub broadcasts its second input only");
    const std::string& an = n.input(swap ? 1 : 0);
    const std::string& bn = n.input(swap ? 0 : 1);
    const std::vector<int64_t> a = value(an).shape, b = value(bn).shape;
    const std::string name = layer_name(n, "");
    // mul also spreads a second input that is the first's leading axes then ones ([N, C, 1, 1]
    // times [N, C, H, W]: a squeeze-and-excitation gate).
    auto leading_then_ones = [&] {
        if (b.size() != a.size()) return false;
        size_t k = 0;
        while (k < b.size() && b[k] == a[k]) ++k;
        return std::all_of(b.begin() + static_cast<long>(k), b.end(), [](int64_t d) { return d == 1; });
    };
    std::string b_node;
    if (a == b || (mul && leading_then_ones())) {
        b_node = use(bn, n);
    } else {
        // Both broadcast b over a's leading axes when b's sample is the trailing part of a's
        // ([T, F] + [F]); ONNX writes that b with 1s in front ([N, 1, F]): those are dropped.
        std::vector<int64_t> tail(b.begin() + 1, b.end());
        while (!tail.empty() && tail.front() == 1) tail.erase(tail.begin());
        const bool fits = b.size() == a.size() && b[0] == a[0] && !tail.empty() &&  // same rank: aligned axis by axis
                          std::equal(tail.begin(), tail.end(), a.end() - static_cast<long>(tail.size()));
        if (!fits)
            refuse(n, mul ? "multiplies " + shape_text(a) + " by " + shape_text(b) +
                                "; xylem's mul takes two tensors of one shape, or a second whose sample is the "
                                "trailing axes of the first's, or its leading axes then ones ([N, C, 1, 1] for "
                                "[N, C, H, W])"
                          : (type == "sub" ? "subtracts " + shape_text(b) + " from " + shape_text(a)
                                           : "adds " + shape_text(a) + " and " + shape_text(b)) +
                                "; xylem's " + type + " takes two tensors of one shape, or a second whose sample is the "
                                "trailing axes of the first's");
        b_node = use(bn, n);
        if (tail.size() != b.size() - 1) {  // drop the leading 1s: a reshape of each sample
            const std::string flat = name + "_flat";
            names_.insert(flat);
            std::vector<int64_t> shape{b[0]};
            shape.insert(shape.end(), tail.begin(), tail.end());
            layers_.push_back(LayerOut{"reshape", flat, {b_node}, {{"shape", toml_ints(tail)}}});
            layer_shapes_[flat] = shape;
            b_node = flat;
        }
    }
    LayerOut l{type, name, {use(an, n), b_node}, {}};
    emit(std::move(l), n, a, n.output(0));
}

void Importer::batchnorm(const onnx::NodeProto& n) {
    check_known_attrs(n, {"epsilon", "momentum", "training_mode"});
    if (attr_int(n, "training_mode", 0)) refuse(n, "training_mode = 1: xylem imports batch norm in inference form");
    for (int k = 1; k < n.output_size(); ++k)
        if (!n.output(k).empty() && readers_[n.output(k)])
            refuse(n, "its running statistics outputs are read (a training graph)");
    const Value& x = value(input_of(n, 0));
    if (x.shape.size() < 2) refuse(n, "needs a channel axis");
    const int64_t c = x.shape[1];
    const char* names[] = {"scale", "B", "mean", "var"};
    const char* xylem[] = {"weight", "bias", "running_mean", "running_var"};
    const std::string name = layer_name(n, input_of(n, 1));
    for (int k = 0; k < 4; ++k) {
        const HostTensor& t = constant(n, static_cast<size_t>(k + 1), names[k]);
        if (!t.is_float || t.dims != std::vector<int64_t>{c})
            refuse(n, std::string(names[k]) + " " + shape_text(t.dims) + " does not match " + std::to_string(c) +
                          " channels");
        param(name, xylem[k], {c}, t.f);
    }
    const float eps = attr_float(n, "epsilon", 1e-5f), momentum = attr_float(n, "momentum", 0.9f);
    if (!(eps > 0) || !(momentum >= 0 && momentum <= 1)) refuse(n, "epsilon must be positive and momentum in [0, 1]");
    // ONNX: running = running * momentum + batch * (1 - momentum); PyTorch and xylem: the reverse.
    LayerOut l{"batchnorm",
               name,
               {use(input_of(n, 0), n)},
               {{"eps", toml_float(eps)}, {"momentum", toml_float(1.0 - static_cast<double>(momentum))}}};
    emit(std::move(l), n, x.shape, n.output(0));
}

void Importer::pool(const onnx::NodeProto& n, bool max) {
    if (max)
        check_known_attrs(n,
                          {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"});
    else
        check_known_attrs(n, {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"});
    if (max && n.output_size() > 1 && !n.output(1).empty() && readers_[n.output(1)])
        refuse(n, "its Indices output has no xylem equivalent");
    const Value& x = value(input_of(n, 0));
    if (x.shape.size() != 4) refuse(n, "xylem pools 2-D maps (NCHW) only");
    const auto kernel = attr_ints(n, "kernel_shape", {});
    if (kernel.size() != 2 || kernel[0] != kernel[1] || kernel[0] < 1)
        refuse(n, "kernel_shape " + shape_text(kernel) + ": xylem pools with a square kernel");
    const auto strides = attr_ints(n, "strides", {1, 1});
    if (strides.size() != 2 || strides[0] != strides[1] || strides[0] < 1)
        refuse(n, "strides " + shape_text(strides) + ": xylem takes one stride for both axes");
    std::vector<int64_t> pads = attr_ints(n, "pads", {0, 0, 0, 0});
    const std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID") refuse(n, "auto_pad " + auto_pad + " has no xylem equivalent");
    if (auto_pad == "VALID") pads = {0, 0, 0, 0};
    if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3] || pads[0] != pads[1] || pads[0] < 0)
        refuse(n,
               "pads " + shape_text(pads) + ": xylem pads all four sides alike (asymmetric padding has no equivalent)");
    // A zero Pad before it: zeros counted in the average, as count_include_pad does (MaxPool's
    // padding never wins, a zero would: refused).
    if (x.pad && max) refuse(n, "reads a zero Pad: xylem's max pooling pads with -inf, not zeros");
    bool include_pad = attr_int(n, "count_include_pad", 0) != 0;
    if (x.pad && pads[0] && !include_pad)
        refuse(n, "reads a zero Pad and pads again without counting the padding: xylem has no equivalent");
    if (x.pad) include_pad = true;
    if (pads[0] > INT32_MAX / 4) refuse(n, "attributes out of range");
    const int64_t padding = pads[0] + x.pad;
    if (padding * 2 > kernel[0]) refuse(n, "padding " + std::to_string(padding) + " is more than half the kernel");
    if (max) {
        const auto dil = attr_ints(n, "dilations", {1, 1});
        if (dil != std::vector<int64_t>{1, 1}) refuse(n, "dilations " + shape_text(dil) + " have no xylem equivalent");
        if (attr_int(n, "storage_order", 0)) refuse(n, "storage_order = 1 has no xylem equivalent");
    }
    if (kernel[0] > INT32_MAX || strides[0] > INT32_MAX || pads[0] > INT32_MAX / 2)
        refuse(n, "attributes out of range");
    const int64_t oh = (x.shape[2] + 2 * pads[0] - kernel[0]) / strides[0] + 1;
    const int64_t ow = (x.shape[3] + 2 * pads[0] - kernel[0]) / strides[0] + 1;
    if (oh < 1 || ow < 1 || x.shape[2] + 2 * pads[0] < kernel[0] || x.shape[3] + 2 * pads[0] < kernel[0])
        refuse(n, "its output would be empty for input " + shape_text(x.shape));
    // ceil_mode rounds the output size up where xylem's pools round down: the same pooling where
    // the windows tile the padded input exactly (SqueezeNet's 3x3 stride-2 pools on 109 and 55),
    // else one more, partial window per row and column, which xylem has no layer for.
    if (attr_int(n, "ceil_mode", 0)) {
        const int64_t ch = oh + ((x.shape[2] + 2 * pads[0] - kernel[0]) % strides[0] != 0);
        const int64_t cw = ow + ((x.shape[3] + 2 * pads[0] - kernel[0]) % strides[0] != 0);
        if (ch != oh || cw != ow)
            refuse(n, "ceil_mode = 1 gives a " + std::to_string(ch) + "x" + std::to_string(cw) + " output for input " +
                          shape_text(x.shape) + " where xylem's pools round down to " + std::to_string(oh) + "x" +
                          std::to_string(ow) + " (the same only where the windows tile the input exactly)");
    }
    std::vector<std::pair<std::string, std::string>> keys{{"kernel", std::to_string(kernel[0])},
                                                          {"stride", std::to_string(strides[0])},
                                                          {"padding", std::to_string(padding)}};
    if (!max) keys.push_back({"count_include_pad", include_pad ? "true" : "false"});
    LayerOut l{max ? "maxpool2d" : "avgpool2d", layer_name(n, ""), {use(input_of(n, 0), n, !max)}, keys};
    emit(std::move(l), n, {x.shape[0], x.shape[1], oh, ow}, n.output(0));
}

// Clip (opset 11 on: min and max are optional inputs, each a constant scalar) -> clamp; an absent
// bound is -inf or +inf. torch exports ReLU6 so (MobileNetV2).
void Importer::clip(const onnx::NodeProto& n) {
    check_known_attrs(n, {});
    const Value& x = value(input_of(n, 0));
    float bound[2] = {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
    const char* what[2] = {"min", "max"};
    for (int k = 0; k < 2; ++k) {
        if (n.input_size() <= k + 1 || n.input(k + 1).empty()) continue;
        const HostTensor& t = constant(n, static_cast<size_t>(k + 1), what[k]);
        if (!t.is_float || t.f.size() != 1 || !t.dims.empty())
            refuse(n, std::string("its ") + what[k] + " must be a float scalar, got " +
                          (t.is_float ? "float " : "integer ") + shape_text(t.dims));
        // -inf for min and +inf for max are no bound; NaN or the other infinity has no clamp layer.
        if (std::isnan(t.f[0]) || (std::isinf(t.f[0]) && (t.f[0] < 0) != (k == 0)))
            refuse(n, std::string("its ") + what[k] + " is " + toml_float(t.f[0]));
        bound[k] = t.f[0];
    }
    if (!(bound[0] <= bound[1])) refuse(n, "min " + toml_float(bound[0]) + " is above max " + toml_float(bound[1]));
    if (bound[0] == 0.f && bound[1] == 6.f) {  // ReLU6: an activation a conv or linear runs as its epilogue
        LayerOut l{"relu6", layer_name(n, ""), {use(input_of(n, 0), n)}, {}};
        emit(std::move(l), n, x.shape, n.output(0));
        return;
    }
    std::vector<std::pair<std::string, std::string>> keys;  // an absent bound is left out (finite numbers only)
    if (std::isfinite(bound[0])) keys.push_back({"lo", toml_float(bound[0])});
    if (std::isfinite(bound[1])) keys.push_back({"hi", toml_float(bound[1])});
    LayerOut l{"clamp", layer_name(n, ""), {use(input_of(n, 0), n)}, keys};
    emit(std::move(l), n, x.shape, n.output(0));
}

// HardSigmoid(x) = clamp(alpha*x + beta, 0, 1), HardSwish(x) = x * HardSigmoid(x) with alpha 1/6
// and beta 1/2 (MobileNetV3): scale, bias and clamp layers, then mul, no layer type of their own.
void Importer::hard_sigmoid(const onnx::NodeProto& n) {
    const bool swish = n.op_type() == "HardSwish";
    if (swish) check_known_attrs(n, {});
    else check_known_attrs(n, {"alpha", "beta"});
    const Value& x = value(input_of(n, 0));
    const float alpha = swish ? 1.0f / 6.0f : attr_float(n, "alpha", 0.2f);
    const float beta = swish ? 0.5f : attr_float(n, "beta", 0.5f);
    if (!std::isfinite(alpha) || !std::isfinite(beta))
        refuse(n, "alpha " + toml_float(alpha) + " and beta " + toml_float(beta) + " must be finite");
    const std::vector<int64_t> shape = x.shape;
    const std::string in = use(input_of(n, 0), n);
    const std::string scaled = inner_layer(n, "_alpha", LayerOut{"scale", "", {in}, {{"shape", "[1]"}}}, shape);
    param(scaled, "weight", {1}, {alpha});
    const std::string shifted = inner_layer(n, "_beta", LayerOut{"bias", "", {scaled}, {{"shape", "[1]"}}}, shape);
    param(shifted, "weight", {1}, {beta});
    LayerOut clamp{"clamp", "", {shifted}, {{"lo", "0.0"}, {"hi", "1.0"}}};
    if (!swish) {
        clamp.name = layer_name(n, "");
        emit(std::move(clamp), n, shape, n.output(0));
        return;
    }
    const std::string gate = inner_layer(n, "_gate", std::move(clamp), shape);
    emit(LayerOut{"mul", layer_name(n, ""), {in, gate}, {}}, n, shape, n.output(0));
}

bool Importer::constant_op(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    if ((op != "Add" && op != "Sub" && op != "Mul" && op != "Div") || n.input_size() != 2) return false;
    const int k = value(input_of(n, 0)).is_const ? 0 : value(input_of(n, 1)).is_const ? 1 : -1;
    if (k < 0) return false;
    check_known_attrs(n, {});
    const Value& x = value(n.input(1 - k));
    const HostTensor& c = value(n.input(k)).c;
    if (k == 0 && (op == "Sub" || op == "Div"))
        refuse(n, std::string(op == "Sub" ? "subtracts the model's data from" : "divides") + " a constant" +
                      (op == "Div" ? " by the model's data" : "") + "; xylem's bias and scale take the data first");
    if (!c.is_float) refuse(n, "its constant is not float");
    // The constant's axes after its leading 1s: one value, or the trailing axes of each sample.
    std::vector<int64_t> dims = c.dims;
    while (!dims.empty() && dims.front() == 1) dims.erase(dims.begin());
    const std::vector<int64_t> sample(x.shape.begin() + 1, x.shape.end());
    const bool single = c.numel() == 1;
    const bool trailing = !dims.empty() && dims.size() <= sample.size() && c.dims.size() <= x.shape.size() &&
                          std::equal(dims.begin(), dims.end(), sample.end() - static_cast<long>(dims.size()));
    if (!single && !trailing)
        refuse(n, std::string(op == "Add" || op == "Sub" ? "adds" : "multiplies by") + " a constant " +
                      shape_text(c.dims) + " that is not one value or the trailing axes of each sample " +
                      shape_text(x.shape) + " (xylem's bias and scale; a constant over the batch has no layer)");
    std::vector<float> w = c.f;
    for (float& v : w) v = op == "Sub" ? -v : op == "Div" ? 1.0f / v : v;
    const std::vector<int64_t> shape = single ? std::vector<int64_t>{1} : dims;
    const bool scale = op == "Mul" || op == "Div";
    const std::string name = layer_name(n, n.input(k));
    param(name, "weight", shape, std::move(w));
    LayerOut l{scale ? "scale" : "bias", name, {use(n.input(1 - k), n)}, {{"shape", toml_ints(shape)}}};
    emit(std::move(l), n, x.shape, n.output(0));
    return true;
}

// Pad (constant zeros, the same on every side of H and W): no layer; the Conv or AveragePool
// reading it takes it as padding (torch exports AvgPool2d(padding=p) as Pad then AveragePool).
void Importer::pad(const onnx::NodeProto& n) {
    check_known_attrs(n, {"mode"});
    if (attr_string(n, "mode", "constant") != "constant")
        refuse(n, "mode " + attr_string(n, "mode", "") + ": xylem folds constant zero padding only");
    const Value& x = value(input_of(n, 0));
    const HostTensor& p = constant(n, 1, "pads");
    if (p.is_float || x.shape.size() != 4 || p.i.size() != 8)
        refuse(n, "xylem folds the Pad of an NCHW map by 8 integer pads only");
    if (n.input_size() > 2 && !n.input(2).empty()) {
        const HostTensor& c = constant(n, 2, "constant_value");
        const bool zero = c.is_float ? (c.f.size() == 1 && c.f[0] == 0.f) : (c.i.size() == 1 && c.i[0] == 0);
        if (!zero) refuse(n, "pads with a value other than 0");
    }
    const std::vector<int64_t>& v = p.i;
    if (v[0] || v[1] || v[4] || v[5] || v[2] != v[3] || v[2] != v[6] || v[2] != v[7] || v[2] < 0 ||
        v[2] > INT32_MAX / 4)
        refuse(n, "pads " + shape_text(v) + ": xylem folds a Pad of H and W alike on all four sides only");
    Value out = x;
    out.pad += v[2];
    out.shape[2] += 2 * v[2];
    out.shape[3] += 2 * v[2];
    if (out.pad > INT32_MAX / 4) refuse(n, "padding out of range");
    values_[n.output(0)] = out;
    out_.notes.push_back("folded " + label(n) + " into the padding of the layer reading it");
}

// A reshape of the model's data to ONNX's full shape `out_shape`, whose first axis must be the batch.
void Importer::reshape_like(const onnx::NodeProto& n, const std::vector<int64_t>& out_shape, const std::string& input) {
    const Value& x = value(input);
    if (out_shape.empty() || out_shape[0] != x.shape[0])
        refuse(n, "reshapes " + shape_text(x.shape) + " to " + shape_text(out_shape) +
                      ", which moves the batch axis; xylem reshapes each sample");
    const std::vector<int64_t> sample(out_shape.begin() + 1, out_shape.end());
    if (sample.empty()) refuse(n, "leaves no axis per sample");
    // A global_avgpool's [C] reshaped to [C] or flattened needs nothing.
    std::vector<int64_t> flat_input(x.shape.begin() + 1, x.shape.end());
    if (x.squeezed && sample.size() == 1) {
        values_[n.output(0)] = x;
        values_[n.output(0)].squeezed = false;
        values_[n.output(0)].shape = out_shape;
        return;
    }
    LayerOut l{"reshape", layer_name(n, ""), {use(input, n)}, {{"shape", toml_ints(sample)}}};
    emit(std::move(l), n, out_shape, n.output(0));
}

// Identity, and Dropout in inference: nothing; the output is the input.
void Importer::skip(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    if (op == "Dropout") {
        check_known_attrs(n, {"seed"});
        if (n.input_size() > 2 && !n.input(2).empty()) {
            const HostTensor& t = constant(n, 2, "training_mode");
            if (t.is_float || t.i.size() != 1 || t.i[0])
                refuse(n, "training_mode is not false: xylem imports inference graphs");
        }
        if (n.output_size() > 1 && !n.output(1).empty() && readers_[n.output(1)]) refuse(n, "its mask output is read");
    }
    values_[n.output(0)] = value(input_of(n, 0));
    out_.notes.push_back("skipped " + label(n));
}

// Cast of the model's data: float to float only, nothing to run.
void Importer::cast(const onnx::NodeProto& n) {
    check_known_attrs(n, {"to", "saturate"});
    if (attr_int(n, "to", 0) != onnx::TensorProto::FLOAT) refuse(n, "casts the model's data away from float");
    values_[n.output(0)] = value(input_of(n, 0));
    out_.notes.push_back("skipped " + label(n) + " (float to float)");
}

// Relu, Sigmoid, Tanh.
void Importer::activation(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    const Value& x = value(input_of(n, 0));
    check_known_attrs(n, {});
    const std::string type = op == "Relu" ? "relu" : op == "Sigmoid" ? "sigmoid" : "tanh";
    const std::vector<int64_t> shape = x.shape;
    LayerOut l{type, layer_name(n, ""), {use(input_of(n, 0), n)}, {}};
    emit(std::move(l), n, shape, n.output(0));
}

// Softmax, LogSoftmax: over the last axis (opset 13 on: one axis, default -1).
void Importer::softmax(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    const Value& x = value(input_of(n, 0));
    check_known_attrs(n, {"axis"});
    // Opset 13 on: the op normalises along one axis (default -1); before 13 it flattened to 2-D.
    auto fail = [&](const std::string& why) { refuse(n, why); };
    const int64_t axis = normalize_axis(attr_int(n, "axis", -1), x.shape.size(), fail);
    if (axis != static_cast<int64_t>(x.shape.size()) - 1 || axis == 0)
        refuse(n, "axis " + std::to_string(axis) + ": xylem's " + (op == "Softmax" ? "softmax" : "log_softmax") +
                      " normalises over the last axis only");
    const std::vector<int64_t> shape = x.shape;
    LayerOut l{op == "Softmax" ? "softmax" : "log_softmax", layer_name(n, ""), {use(input_of(n, 0), n)}, {}};
    emit(std::move(l), n, shape, n.output(0));
}

// GlobalAveragePool: xylem's gives [C]; the value keeps ONNX's [C, 1, 1] and is marked squeezed.
void Importer::global_avgpool(const onnx::NodeProto& n) {
    const Value& x = value(input_of(n, 0));
    check_known_attrs(n, {});
    if (x.shape.size() != 4) refuse(n, "xylem pools 2-D maps (NCHW) only");
    const std::vector<int64_t> shape{x.shape[0], x.shape[1], 1, 1};
    LayerOut l{"global_avgpool", layer_name(n, ""), {use(input_of(n, 0), n)}, {}};
    emit(std::move(l), n, shape, n.output(0));
    values_[n.output(0)].squeezed = true;  // xylem's global_avgpool gives [C]
}

// Flatten (axis 1); nothing when the input is flat already.
void Importer::flatten(const onnx::NodeProto& n) {
    const Value& x = value(input_of(n, 0));
    check_known_attrs(n, {"axis"});
    int64_t axis = attr_int(n, "axis", 1);
    if (axis < 0) axis += static_cast<int64_t>(x.shape.size());
    if (axis != 1) refuse(n, "axis " + std::to_string(axis) + ": xylem flattens each sample (axis 1) only");
    int64_t features = 1;
    for (size_t k = 1; k < x.shape.size(); ++k) features *= x.shape[k];
    if (x.squeezed || x.shape.size() == 2) {  // already [N, features]
        values_[n.output(0)] = x;
        values_[n.output(0)].squeezed = false;
        values_[n.output(0)].shape = {x.shape[0], features};
        out_.notes.push_back("skipped " + label(n) + " (its input is flat already)");
        return;
    }
    LayerOut l{"flatten", layer_name(n, ""), {use(input_of(n, 0), n)}, {}};
    emit(std::move(l), n, {x.shape[0], features}, n.output(0));
}

// Reshape by a constant or folded shape that keeps the batch axis.
void Importer::reshape(const onnx::NodeProto& n) {
    const Value& x = value(input_of(n, 0));
    check_known_attrs(n, {"allowzero"});
    const HostTensor& s = constant(n, 1, "shape");
    if (s.is_float || s.dims.size() != 1) refuse(n, "its shape must be a 1-D integer constant");
    const bool allowzero = attr_int(n, "allowzero", 0) != 0;
    if (s.i.empty()) refuse(n, "its shape [] drops the batch axis; xylem reshapes each sample");
    // The batch axis: kept (its size, the batch mark, or a copying 0), or a -1 that the sample's
    // axes leave to be the batch; then ONNX's rule on each sample's axes.
    const int64_t d0 = s.i[0];
    const bool kept = d0 == x.shape[0] || d0 == kBatchMark || (d0 == 0 && !allowzero);
    if (!kept && d0 != -1) refuse(n, "its shape " + shape_text(s.i) + " changes the batch axis; xylem reshapes each sample");
    const std::vector<int64_t> tail(s.i.begin() + 1, s.i.end()), sample(x.shape.begin() + 1, x.shape.end());
    if (!kept && std::count(tail.begin(), tail.end(), -1))
        refuse(n, "its shape " + shape_text(s.i) + " has two -1");
    std::vector<int64_t> out{x.shape[0]};
    for (int64_t d : reshape_dims(n, tail, sample, allowzero, false, s.i)) out.push_back(d);
    return reshape_like(n, out, input_of(n, 0));
}

// Unsqueeze, Squeeze on the model's data (not the batch axis); Squeeze(1) of an LSTM's or GRU's Y.
void Importer::squeeze(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    const Value& x = value(input_of(n, 0));
    check_known_attrs(n, {});
    std::vector<int64_t> axes;
    if (n.input_size() > 1 && !n.input(1).empty()) {
        const HostTensor& t = constant(n, 1, "axes");
        if (t.is_float) refuse(n, "its axes must be integers");
        axes = t.i;
    }
    if (x.layout == Value::kLstmY) {  // Y [T, 1, N, H] without its direction axis: [T, N, H]
        if (op != "Squeeze" || axes != std::vector<int64_t>{1})
            refuse(n, "xylem reads an LSTM's Y through Squeeze of axis 1 only");
        Value v = x;
        v.shape.erase(v.shape.begin() + 1);
        v.layout = Value::kTimeMajor;
        values_[n.output(0)] = v;
        return;
    }
    if (x.layout != Value::kBatchMajor || x.zeros) refuse(n, "reshapes a time-major or zero-state tensor");
    auto fail = [&](const std::string& why) { refuse(n, why); };
    std::vector<int64_t> dims = x.shape;
    if (op == "Unsqueeze") {
        const size_t rank = dims.size() + axes.size();
        std::vector<int64_t> norm;
        for (int64_t a : axes) norm.push_back(normalize_axis(a, rank, fail));
        std::sort(norm.begin(), norm.end());
        if (std::adjacent_find(norm.begin(), norm.end()) != norm.end()) refuse(n, "repeats an axis");
        for (int64_t a : norm) {
            if (a == 0) refuse(n, "inserts an axis before the batch");
            if (a > static_cast<int64_t>(dims.size())) refuse(n, "axis " + std::to_string(a) + " is out of range");
            dims.insert(dims.begin() + a, 1);
        }
    } else {
        if (axes.empty()) refuse(n, "squeezes every axis of size 1, the batch's perhaps; xylem needs explicit axes");
        std::set<int64_t> drop;
        for (int64_t a : axes) drop.insert(normalize_axis(a, dims.size(), fail));
        if (drop.count(0)) refuse(n, "squeezes the batch axis");
        std::vector<int64_t> keep;
        for (size_t k = 0; k < dims.size(); ++k) {
            if (drop.count(static_cast<int64_t>(k))) {
                if (dims[k] != 1)
                    refuse(n, "squeezes axis " + std::to_string(k) + " of size " + std::to_string(dims[k]));
                continue;
            }
            keep.push_back(dims[k]);
        }
        dims = keep;
    }
    return reshape_like(n, dims, input_of(n, 0));
}

// Concat along axis 1 or later.
void Importer::concat(const onnx::NodeProto& n) {
    const Value& x = value(input_of(n, 0));
    check_known_attrs(n, {"axis"});
    auto fail = [&](const std::string& why) { refuse(n, why); };
    const int64_t axis = normalize_axis(attr_int(n, "axis", 0), x.shape.size(), fail);
    if (axis == 0) refuse(n, "joins along the batch axis; xylem's concat joins axis 1 or later");
    if (n.input_size() == 1) {  // torch.cat of one tensor (DenseNet's first layer of each block): the tensor
        if (x.is_const) refuse(n, "joins a constant to the model's data; xylem's concat joins layer outputs");
        values_[n.output(0)] = value(input_of(n, 0));
        out_.notes.push_back("skipped " + label(n) + " (one input)");
        return;
    }
    std::vector<int64_t> shape = x.shape;
    shape[static_cast<size_t>(axis)] = 0;
    std::vector<std::string> inputs;
    for (const auto& in : n.input()) {
        const Value& v = value(in);
        if (v.is_const) refuse(n, "joins a constant to the model's data; xylem's concat joins layer outputs");
        if (v.shape.size() != x.shape.size()) refuse(n, "joins tensors of different ranks");
        for (size_t k = 0; k < v.shape.size(); ++k)
            if (static_cast<int64_t>(k) != axis && v.shape[k] != x.shape[k])
                refuse(n, "joins " + shape_text(x.shape) + " and " + shape_text(v.shape) + " along axis " +
                              std::to_string(axis));
        shape[static_cast<size_t>(axis)] += v.shape[static_cast<size_t>(axis)];
        inputs.push_back(use(in, n));
    }
    LayerOut l{"concat", layer_name(n, ""), inputs, {{"axis", std::to_string(axis)}}};
    emit(std::move(l), n, shape, n.output(0));
}

// The walk's step for one node: the checks every node gets, constants folded, patterns and
// constant arithmetic, then the op's handler from the importer's table (importer.cpp).
void Importer::visit(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    if (n.output_size() < 1 || n.output(0).empty())
        refuse(n, "has no first output (the one xylem layers give; an LSTM's Y)");
    for (int k = 1; k < n.output_size(); ++k)
        if (!n.output(k).empty() && readers_[n.output(k)] && op != "Dropout" && op != "MaxPool" &&
            op != "BatchNormalization" && op != "Split")
            refuse(n, "its output " + std::to_string(k) + " is read; xylem layers have one output");
    if (absorbed_.count(current_)) return;  // a linear layer's bias
    bool all_const = true;
    for (const auto& in : n.input())
        if (!in.empty() && !value(in).is_const) all_const = false;
    if (op == "ConstantOfShape") return constant_of_shape(n);  // also of the batch's shape: not fold()'s
    if (all_const || op == "Constant" || op == "Shape") return fold(n);
    if (pattern(n) || constant_op(n)) return;
    for (const OpEntry& e : table())
        if (op == e.op && e.handle) return e.handle(*this, n);
    refuse(n, "reads the model's data, and xylem only folds this op on constants");
}

}  // namespace xylem::onnx_import::detail
