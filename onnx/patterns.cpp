// Patterns that torch (and xylem's exporter) write as many nodes and xylem runs as one fused layer
// (importer_impl.h's Pending): each node of a pattern turns its input's Pending into the next
// step's, and the last emits the layer. A step read by anything but the pattern's next node is an
// error naming that reader (Importer::use), so a graph that only looks like a pattern half-way
// never imports wrong.
//   layer norm  ReduceMean(x, -1), Sub(x, mean), Pow(d, 2), ReduceMean, Add(eps), Sqrt, Div(d, std)
//               [, Mul(weight), Add(bias)] -> layer_norm; LayerNormalization (opset 17) likewise.
//   GELU        Div(x, sqrt 2) or Mul(x, 1/sqrt 2), Erf, Add(1), Mul(x, .), Mul(0.5) -> gelu; the tanh
//               form Mul(x, x), Mul(x), Mul(0.044715), Add(x), Mul(sqrt(2/pi)), Tanh, Add(1), Mul by
//               Mul(x, 0.5), or torch's Mul(x, .) then Mul(0.5) -> gelu with approximate = "tanh".
//   attention   the q, k, v Split of a linear's [N, T, 3C], each Reshape [N, T, h, d] and Transpose
//               [0, 2, 1, 3] (k to [0, 2, 3, 1]), MatMul(q, k), Mul or Div by a constant, a causal
//               mask (Where of a constant -inf above the diagonal, or Add of a constant mask),
//               Softmax(-1), MatMul(p, v), Transpose [0, 2, 1, 3], Reshape [N, T, C], MatMul by the
//               projection [+ Add(bias)] -> attention (the linear's weights as c_attn's).
//   embeddings  Gather(table, token ids) -> embedding; Add(x, constant [T, C]) -> position_embedding.
#include <algorithm>
#include <cmath>

#include "importer_impl.h"
#include "xylem/error.h"

namespace xylem::onnx_import::detail {

namespace {
// The value of a one-element constant, if `v` is one.
bool scalar_of(const Value& v, double& out) {
    if (!v.is_const || v.c.numel() != 1) return false;
    out = v.c.is_float ? static_cast<double>(v.c.f[0]) : static_cast<double>(v.c.i[0]);
    return true;
}

bool near(double a, double b) {
    return std::fabs(a - b) <= 1e-5 * std::max(1.0, std::fabs(b));
}

// The masked value of a causal mask: -inf or anything below -1e4 (exp gives 0 in float either way).
bool masks(double v) {
    return v <= -1e4;
}

Pending step(const Pending& from, const std::string& kind) {
    Pending p = from;
    p.kind = kind;
    return p;
}
}  // namespace

bool Importer::pattern(const onnx::NodeProto& n) {
    return layer_norm_step(n) || gelu_step(n) || attention_step(n) || embedding_step(n);
}

void Importer::layer_norm(const onnx::NodeProto& n, const std::string& x, float eps, const HostTensor* weight,
                          const HostTensor* bias, const std::string& output, const std::string& weight_name) {
    const Value& v = value(x);
    if (v.shape.size() < 2) refuse(n, "normalises a tensor without a feature axis");
    const int64_t c = v.shape.back();
    if (!(eps > 0) || !std::isfinite(eps)) refuse(n, "epsilon " + toml_float(eps) + " must be positive");
    for (const HostTensor* t : {weight, bias})
        if (t && (!t->is_float || t->numel() != c || (t->dims.size() != 1 && !(t->dims.size() == 0 && c == 1))))
            refuse(n, "its scale or bias " + shape_text(t->dims) + " is not [" + std::to_string(c) +
                          "] (xylem normalises the last axis)");
    const std::string name = layer_name(n, weight_name);
    param(name, "weight", {c}, weight ? weight->f : std::vector<float>(static_cast<size_t>(c), 1.f));
    if (bias) param(name, "bias", {c}, bias->f);
    LayerOut l{"layer_norm", name, {use(x, n)}, {{"eps", toml_float(eps)}, {"bias", bias ? "true" : "false"}}};
    emit(std::move(l), n, v.shape, output);
}

bool Importer::layer_norm_step(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    if (op == "LayerNormalization") {
        check_known_attrs(n, {"axis", "epsilon", "stash_type"});
        const Value& x = value(input_of(n, 0));
        auto fail = [&](const std::string& why) { refuse(n, why); };
        if (normalize_axis(attr_int(n, "axis", -1), x.shape.size(), fail) != static_cast<int64_t>(x.shape.size()) - 1)
            refuse(n, "axis " + std::to_string(attr_int(n, "axis", -1)) +
                          ": xylem's layer_norm normalises the last axis only");
        const HostTensor* bias = n.input_size() > 2 && !n.input(2).empty() ? &constant(n, 2, "bias") : nullptr;
        layer_norm(n, input_of(n, 0), attr_float(n, "epsilon", 1e-5f), &constant(n, 1, "scale"), bias, n.output(0),
                   n.input(1));
        return true;
    }
    auto in = [&](int k) -> const Value& { return value(input_of(n, k)); };
    if (op == "ReduceMean") {
        check_known_attrs(n, {"axes", "keepdims"});
        const Value& x = in(0);
        if (n.input_size() > 1) refuse(n, "takes its axes as an input (opset 18); xylem reads opsets 13 to 17");
        const std::vector<int64_t> axes = attr_ints(n, "axes", {});
        const int64_t last = static_cast<int64_t>(x.shape.size()) - 1;
        // The mean over H and W of NCHW maps (MNASNet's x.mean([2, 3])): a global average pool,
        // [N, C] without keepdims, ONNX's [N, C, 1, 1] (xylem's [C], marked squeezed) with.
        std::vector<int64_t> spatial;
        for (int64_t a : axes) spatial.push_back(a < 0 ? a + static_cast<int64_t>(x.shape.size()) : a);
        std::sort(spatial.begin(), spatial.end());
        if (x.shape.size() == 4 && spatial == std::vector<int64_t>{2, 3} && !x.is_const && x.pending.kind.empty()) {
            const bool keep = attr_int(n, "keepdims", 1) != 0;
            std::vector<int64_t> shape{x.shape[0], x.shape[1]};
            if (keep) shape.insert(shape.end(), {1, 1});
            LayerOut l{"global_avgpool", layer_name(n, ""), {use(input_of(n, 0), n)}, {}};
            emit(std::move(l), n, shape, n.output(0));
            values_[n.output(0)].squeezed = keep;
            return true;
        }
        if (axes.size() != 1 || (axes[0] != -1 && axes[0] != last) || !attr_int(n, "keepdims", 1))
            refuse(n,
                   "xylem imports ReduceMean only as a layer norm's mean over the last axis (axes [-1], keepdims 1) "
                   "or as the mean over H and W of NCHW maps (axes [2, 3])");
        Value v;
        v.shape = x.shape;
        v.shape.back() = 1;
        if (x.pending.kind == "ln.square")
            v.pending = step(x.pending, "ln.variance");
        else if (x.pending.kind.empty() && !x.is_const)
            v.pending = Pending{"ln.mean", n.input(0)};
        else
            refuse(n, "reads '" + n.input(0) + "': xylem imports ReduceMean only as a layer norm's mean or variance");
        values_[n.output(0)] = v;
        return true;
    }
    if (op == "Sub" && in(1).pending.kind == "ln.mean" && in(1).pending.of == n.input(0)) {
        check_known_attrs(n, {});
        Value v;
        v.shape = in(0).shape;
        v.pending = step(in(1).pending, "ln.centered");
        values_[n.output(0)] = v;
        return true;
    }
    double k = 0;
    if (op == "Pow" && in(0).pending.kind == "ln.centered") {
        check_known_attrs(n, {});
        if (!scalar_of(in(1), k) || k != 2) refuse(n, "xylem imports Pow only as a layer norm's square (exponent 2)");
        Value v = in(0);
        v.pending = step(in(0).pending, "ln.square");
        values_[n.output(0)] = v;
        return true;
    }
    if (op == "Add" && in(0).pending.kind == "ln.variance") {
        check_known_attrs(n, {});
        if (!scalar_of(in(1), k)) refuse(n, "adds a non-scalar to a layer norm's variance");
        Value v = in(0);
        v.pending = step(in(0).pending, "ln.variance_eps");
        v.pending.eps = static_cast<float>(k);
        values_[n.output(0)] = v;
        return true;
    }
    if (op == "Sqrt" && in(0).pending.kind == "ln.variance_eps") {
        check_known_attrs(n, {});
        Value v = in(0);
        v.pending = step(in(0).pending, "ln.std");
        values_[n.output(0)] = v;
        return true;
    }
    if (op == "Div" && in(0).pending.kind == "ln.centered") {
        check_known_attrs(n, {});
        const Value& s = in(1);
        if (s.pending.kind != "ln.std" || s.pending.of != in(0).pending.of)
            refuse(n, "divides a layer norm's centred input by something other than its standard deviation");
        // The affine part, when the next nodes are Mul by a constant [C] and Add of one.
        const HostTensor *weight = nullptr, *bias = nullptr;
        std::string output = n.output(0), weight_name;
        const int j = sole_reader(output);
        auto const_operand = [&](const onnx::NodeProto& m, const std::string& data) -> const Value* {
            if (m.input_size() != 2) return nullptr;
            const std::string& other = m.input(0) == data ? m.input(1) : m.input(0);
            auto it = values_.find(other);
            return it != values_.end() && it->second.is_const ? &it->second : nullptr;
        };
        if (j >= 0 && g_.node(j).op_type() == "Mul") {
            if (const Value* w = const_operand(g_.node(j), output)) {
                weight = &w->c;
                const auto& m = g_.node(j);
                weight_name = m.input(0) == output ? m.input(1) : m.input(0);
                absorbed_.insert(j);
                output = m.output(0);
                const int a = sole_reader(output);
                if (a >= 0 && g_.node(a).op_type() == "Add")
                    if (const Value* b = const_operand(g_.node(a), output)) {
                        bias = &b->c;
                        absorbed_.insert(a);
                        output = g_.node(a).output(0);
                    }
            }
        }
        layer_norm(n, in(0).pending.of, s.pending.eps, weight, bias, output, weight_name);
        return true;
    }
    return false;
}

bool Importer::gelu_step(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    if (op != "Div" && op != "Mul" && op != "Erf" && op != "Add" && op != "Tanh") return false;
    if (n.input_size() < 1) return false;
    auto in = [&](int k) -> const Value& { return value(input_of(n, k)); };
    auto begin = [&](const char* kind) {
        check_known_attrs(n, {});
        Value v = in(0);
        v.node.clear();
        v.pending = Pending{kind, n.input(0)};
        values_[n.output(0)] = v;
        return true;
    };
    double k = 0;
    const bool data0 = in(0).pending.kind.empty() && !in(0).is_const;
    // The first steps on the model's data: x / sqrt(2) or x * (1 / sqrt(2)) (erf form); x * 0.5 and
    // x * x (tanh form).
    if ((op == "Div" || op == "Mul") && n.input_size() == 2 && data0 && scalar_of(in(1), k)) {
        // Either may be no GELU after all: read by anything else, it becomes a scale layer (Importer::use).
        if (op == "Mul" && k == 0.5) return begin("gelu.half");
        if (near(op == "Div" ? k : 1.0 / k, std::sqrt(2.0))) return begin("gelu.scaled");
        return false;  // another constant: a scale layer (constant_op)
    }
    if (op == "Mul" && n.input_size() == 2 && data0 && n.input(0) == n.input(1)) return begin("gelu.square");
    if (op == "Tanh") {
        if (in(0).pending.kind != "gelu.tanh_arg") return false;  // tanh of the data: the activation
        check_known_attrs(n, {});
        Value v = in(0);
        v.pending = step(in(0).pending, "gelu.tanh");
        values_[n.output(0)] = v;
        return true;
    }
    const Value& a = in(0);
    if (op == "Erf") {
        check_known_attrs(n, {});
        if (a.pending.kind != "gelu.scaled") refuse(n, "xylem imports Erf only inside GELU (erf(x / sqrt(2)))");
        Value v = a;
        v.pending = step(a.pending, "gelu.erf");
        values_[n.output(0)] = v;
        return true;
    }
    if (n.input_size() != 2) return false;
    const Value& b = in(1);
    const Value* p = !a.pending.kind.empty() ? &a : !b.pending.kind.empty() ? &b : nullptr;
    if (!p || p->pending.kind.rfind("gelu.", 0) != 0) return false;
    const Value& other = p == &a ? b : a;
    const std::string& other_name = p == &a ? n.input(1) : n.input(0);
    check_known_attrs(n, {});
    Value v = *p;
    const std::string& at = p->pending.kind;
    auto finish = [&](bool tanh) {
        std::vector<std::pair<std::string, std::string>> keys;
        if (tanh) keys.push_back({"approximate", "\"tanh\""});
        LayerOut l{"gelu", layer_name(n, ""), {use(p->pending.of, n)}, keys};
        emit(std::move(l), n, p->shape, n.output(0));
        return true;
    };
    const bool of_x = other_name == p->pending.of;  // the other operand is the pattern's x
    // Erf form: 0.5 x (1 + erf(x / sqrt 2)).
    if (op == "Add" && at == "gelu.erf" && scalar_of(other, k) && k == 1)
        v.pending = step(p->pending, "gelu.erf_plus_1");
    else if (op == "Mul" && at == "gelu.erf_plus_1" && of_x)
        v.pending = step(p->pending, "gelu.x_times");
    else if (op == "Mul" && at == "gelu.x_times" && scalar_of(other, k) && k == 0.5)
        return finish(false);
    // Tanh form (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as xylem's exporter
    // writes it: x * x * x, * 0.044715, + x, * sqrt(2/pi), Tanh, + 1, times x * 0.5.
    else if (op == "Mul" && at == "gelu.square" && of_x)
        v.pending = step(p->pending, "gelu.cube");
    else if (op == "Mul" && at == "gelu.cube" && scalar_of(other, k) && near(k, 0.044715))
        v.pending = step(p->pending, "gelu.cubic_term");
    else if (op == "Add" && at == "gelu.cubic_term" && of_x)
        v.pending = step(p->pending, "gelu.inner");
    else if (op == "Mul" && at == "gelu.inner" && scalar_of(other, k) && near(k, std::sqrt(2.0 / M_PI)))
        v.pending = step(p->pending, "gelu.tanh_arg");
    else if (op == "Add" && at == "gelu.tanh" && scalar_of(other, k) && k == 1)
        v.pending = step(p->pending, "gelu.tanh_plus_1");
    else if (op == "Mul" && at == "gelu.tanh_plus_1" && other.pending.kind == "gelu.half" &&
             other.pending.of == p->pending.of)
        return finish(true);
    else if (op == "Mul" && at == "gelu.tanh_plus_1" && of_x)
        v.pending = step(p->pending, "gelu.tanh_x_times");  // torch's order
    else if (op == "Mul" && at == "gelu.tanh_x_times" && scalar_of(other, k) && k == 0.5)
        return finish(true);
    else if (op == "Mul" && at == "gelu.half" && other.pending.kind == "gelu.tanh_plus_1" &&
             other.pending.of == p->pending.of)
        return finish(true);
    else if (at == "gelu.half" || at == "gelu.scaled")
        return false;  // x * 0.5 or x / sqrt(2) after all: a scale layer
    else
        refuse(n, "breaks GELU's erf or tanh form at step " + at);
    values_[n.output(0)] = v;
    return true;
}

bool Importer::embedding_step(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    if (op == "Gather" && n.input_size() == 2 && value(n.input(0)).is_const && !value(n.input(1)).is_const) {
        check_known_attrs(n, {"axis"});
        const HostTensor& table = constant(n, 0, "data");
        const Value& ids = value(n.input(1));
        if (attr_int(n, "axis", 0) != 0)
            refuse(n, "looks up along axis " + std::to_string(attr_int(n, "axis", 0)) +
                          "; an embedding looks up rows (axis 0)");
        if (!table.is_float || table.dims.size() != 2)
            refuse(n, "its table " + shape_text(table.dims) + " is not a 2-D float constant [vocab, dim]");
        if (!is_token_input(ids.node))
            refuse(n, "looks up rows by indices the model computes; xylem's embedding reads the model's integer input");
        const std::string name = layer_name(n, n.input(0));
        param(name, "weight", table.dims, table.f);
        std::vector<int64_t> shape = ids.shape;
        shape.push_back(table.dims[1]);
        LayerOut l{"embedding",
                   name,
                   {ids.node},
                   {{"vocab", std::to_string(table.dims[0])}, {"dim", std::to_string(table.dims[1])}}};
        emit(std::move(l), n, shape, n.output(0));
        return true;
    }
    if (op == "Add" && n.input_size() == 2) {
        const int k = value(n.input(0)).is_const ? 0 : value(n.input(1)).is_const ? 1 : -1;
        if (k < 0) return false;
        const Value& x = value(n.input(1 - k));
        const HostTensor& pos = value(n.input(k)).c;
        if (x.is_const || !x.pending.kind.empty() || x.shape.size() != 3) return false;
        const int64_t t = x.shape[1], c = x.shape[2];
        const bool fits = pos.dims == std::vector<int64_t>{t, c} || pos.dims == std::vector<int64_t>{1, t, c};
        if (!fits || !pos.is_float) return false;  // the other handlers refuse it with their message
        check_known_attrs(n, {});
        const std::string name = layer_name(n, "");
        param(name, "weight", {t, c}, pos.f);
        LayerOut l{"position_embedding", name, {use(n.input(1 - k), n)}, {{"max_len", std::to_string(t)}}};
        emit(std::move(l), n, x.shape, n.output(0));
        out_.notes.push_back(label(n) + ": a constant [" + std::to_string(t) + ", " + std::to_string(c) +
                             "] added to every sample became a position_embedding");
        return true;
    }
    return false;
}

bool Importer::attention_step(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    auto pend = [&](int k) -> const Pending& { return value(input_of(n, k)).pending; };
    auto is = [&](int k, const char* kind) {
        return n.input_size() > k && !n.input(k).empty() && pend(k).kind == kind;
    };
    auto set = [&](const std::string& out, std::vector<int64_t> shape, Pending p) {
        Value v;
        v.shape = std::move(shape);
        v.pending = std::move(p);
        values_[out] = v;
    };
    if (op == "Split") {
        check_known_attrs(n, {"axis"});
        const Value& x = value(input_of(n, 0));
        auto fail = [&](const std::string& why) { refuse(n, why); };
        const int64_t axis = normalize_axis(attr_int(n, "axis", 0), x.shape.size(), fail);
        auto producer =
            std::find_if(layers_.begin(), layers_.end(), [&](const LayerOut& l) { return l.name == x.node; });
        const bool qkv = !x.is_const && x.pending.kind.empty() && x.shape.size() == 3 && axis == 2 &&
                         n.output_size() == 3 && x.shape[2] % 3 == 0 && producer != layers_.end() &&
                         producer->type == "linear";
        if (!qkv)
            refuse(n,
                   "xylem imports Split only as the q, k, v of attention: a linear's [N, T, 3C] split in three along "
                   "axis 2");
        const int64_t c = x.shape[2] / 3;
        if (n.input_size() > 1 && !n.input(1).empty()) {
            const HostTensor& s = constant(n, 1, "split");
            if (s.is_float || s.i != std::vector<int64_t>{c, c, c})
                refuse(n, "split " + shape_text(s.i) + " is not three equal parts");
        }
        for (int p = 0; p < 3; ++p) {
            Pending q{"attn.part", n.input(0)};
            q.part = p;
            set(n.output(p), {x.shape[0], x.shape[1], c}, q);
        }
        return true;
    }
    if (op == "Reshape" && (is(0, "attn.part") || is(0, "attn.context_bthd"))) {
        check_known_attrs(n, {"allowzero"});
        const Value& x = value(input_of(n, 0));
        const HostTensor& s = constant(n, 1, "shape");
        if (s.is_float || s.dims.size() != 1) refuse(n, "its shape must be a 1-D integer constant");
        std::vector<int64_t> t = s.i;
        for (size_t k = 0; k < t.size(); ++k) {
            if (k == 0 && (t[k] == kBatchMark || t[k] == x.shape[0] || t[k] == 0 || t[k] == -1))
                t[k] = x.shape[0];
            else if (t[k] == 0 && k < x.shape.size())
                t[k] = x.shape[k];
        }
        if (x.pending.kind == "attn.part") {  // [N, T, C] -> [N, T, h, d]
            const int64_t c = x.shape[2];
            if (t.size() == 4 && t[3] == -1 && t[2] > 0 && c % t[2] == 0) t[3] = c / t[2];
            if (t.size() == 4 && t[2] == -1 && t[3] > 0 && c % t[3] == 0) t[2] = c / t[3];
            // Each factor in [1, c] before the product (a hostile shape's product would overflow).
            if (t.size() != 4 || t[0] != x.shape[0] || t[1] != x.shape[1] || t[2] < 1 || t[3] < 1 || t[2] > c ||
                t[3] > c || t[2] * t[3] != c)
                refuse(n, "reshapes attention's " + shape_text(x.shape) + " to " + shape_text(s.i) +
                              ", not [N, T, heads, head size]");
            Pending p = step(x.pending, "attn.heads");
            p.heads = t[2];
            set(n.output(0), t, p);
        } else {  // [N, T, h, d] -> [N, T, C]
            const int64_t c = x.shape[2] * x.shape[3];
            if (t.size() == 3 && t[2] == -1) t[2] = c;
            if (t != std::vector<int64_t>{x.shape[0], x.shape[1], c})
                refuse(n, "merges attention's heads " + shape_text(x.shape) + " to " + shape_text(s.i));
            set(n.output(0), t, step(x.pending, "attn.merged"));
        }
        return true;
    }
    if (op == "Transpose" && n.input_size() == 1 && !pend(0).kind.empty()) {
        check_known_attrs(n, {"perm"});
        const Value& x = value(input_of(n, 0));
        const std::vector<int64_t> perm = attr_ints(n, "perm", {});
        std::vector<int64_t> shape;
        for (int64_t a : perm)
            shape.push_back(a >= 0 && a < static_cast<int64_t>(x.shape.size()) ? x.shape[static_cast<size_t>(a)] : 0);
        const std::vector<int64_t> swap12{0, 2, 1, 3}, to_bhdt{0, 2, 3, 1}, swap23{0, 1, 3, 2};
        const std::string& k = x.pending.kind;
        if (k == "attn.heads" && perm == swap12)
            set(n.output(0), shape, step(x.pending, "attn.bhtd"));
        else if (k == "attn.heads" && perm == to_bhdt && x.pending.part == 1)
            set(n.output(0), shape, step(x.pending, "attn.bhdt"));
        else if (k == "attn.bhtd" && perm == swap23 && x.pending.part == 1)
            set(n.output(0), shape, step(x.pending, "attn.bhdt"));
        else if (k == "attn.context" && perm == swap12)
            set(n.output(0), shape, step(x.pending, "attn.context_bthd"));
        else
            refuse(n, "perm " + shape_text(perm) + " does not fit attention at step " + k);
        return true;
    }
    if (op == "MatMul" && n.input_size() == 2 && (!pend(0).kind.empty() || !pend(1).kind.empty())) {
        check_known_attrs(n, {});
        const Value& a = value(n.input(0));
        const Value& b = value(n.input(1));
        const bool same = a.pending.of == b.pending.of && a.pending.heads == b.pending.heads;
        if (a.pending.kind == "attn.bhtd" && a.pending.part == 0 && b.pending.kind == "attn.bhdt" && same) {
            Pending p = step(a.pending, "attn.scores");
            p.part = -1;
            set(n.output(0), {a.shape[0], a.shape[1], a.shape[2], a.shape[2]}, p);
        } else if (a.pending.kind == "attn.probs" && b.pending.kind == "attn.bhtd" && b.pending.part == 2 && same) {
            set(n.output(0), b.shape, step(a.pending, "attn.context"));
        } else if (a.pending.kind == "attn.merged" && b.is_const) {
            attention(n, a.pending, n.input(0));
        } else {
            refuse(n, "multiplies '" + n.input(0) + "' (" + (a.pending.kind.empty() ? "data" : a.pending.kind) +
                          ") by '" + n.input(1) + "' (" +
                          (b.pending.kind.empty() ? (b.is_const ? "a constant" : "data") : b.pending.kind) +
                          "); xylem imports MatMul of two computed tensors only inside attention (q k^T, then by v)");
        }
        return true;
    }
    if ((op == "Mul" || op == "Div") && n.input_size() == 2 &&
        (is(0, "attn.scores") || (op == "Mul" && is(1, "attn.scores")))) {
        check_known_attrs(n, {});
        const int s = is(0, "attn.scores") ? 0 : 1;
        double k = 0;
        if (!scalar_of(value(n.input(1 - s)), k) || k == 0 || !std::isfinite(k))
            refuse(n, "scales attention's scores by a non-scalar");
        Pending p = pend(s);
        p.scale *= op == "Mul" ? k : 1.0 / k;
        set(n.output(0), value(n.input(s)).shape, p);
        return true;
    }
    if ((op == "Where" && n.input_size() == 3 && (is(1, "attn.scores") || is(2, "attn.scores"))) ||
        (op == "Add" && n.input_size() == 2 && (is(0, "attn.scores") || is(1, "attn.scores")))) {
        check_known_attrs(n, {});
        const int s = op == "Where" ? (is(1, "attn.scores") ? 1 : 2) : (is(0, "attn.scores") ? 0 : 1);
        const Value& scores = value(n.input(s));
        const int64_t t = scores.shape[2];
        // masked(i, j): the value the node leaves at row i, column j (true: masked out).
        std::vector<bool> masked(static_cast<size_t>(t * t));
        auto check_mask_shape = [&](const HostTensor& m) {
            const size_t r = m.dims.size();
            if (m.numel() != t * t || r < 2 || m.dims[r - 1] != t || m.dims[r - 2] != t)
                refuse(n, "its mask " + shape_text(m.dims) + " is not one [T, T] mask for T = " + std::to_string(t));
        };
        if (op == "Where") {
            const HostTensor& cond = constant(n, 0, "condition");
            double fill = 0;
            if (!scalar_of(value(n.input(3 - s)), fill) || !masks(fill))
                refuse(n, "fills attention's scores with something other than -inf (or below -1e4): not a mask");
            check_mask_shape(cond);
            for (int64_t i = 0; i < t * t; ++i) {
                const bool picks_first =
                    cond.is_float ? cond.f[static_cast<size_t>(i)] != 0.f : cond.i[static_cast<size_t>(i)] != 0;
                masked[static_cast<size_t>(i)] = picks_first == (s == 2);  // the constant is picked
            }
        } else {
            const HostTensor& m = constant(n, static_cast<size_t>(1 - s), "mask");
            check_mask_shape(m);
            if (!m.is_float) refuse(n, "adds an integer mask to attention's scores");
            for (int64_t i = 0; i < t * t; ++i) {
                const float v = m.f[static_cast<size_t>(i)];
                if (v != 0.f && !masks(v))
                    refuse(n, "adds values other than 0 and -inf to attention's scores: not a mask");
                masked[static_cast<size_t>(i)] = v != 0.f;
            }
        }
        for (int64_t i = 0; i < t; ++i)
            for (int64_t j = 0; j < t; ++j)
                if (masked[static_cast<size_t>(i * t + j)] != (j > i))
                    refuse(n, "masks attention's scores, but not causally (row " + std::to_string(i) + ", column " +
                                  std::to_string(j) + "): xylem's attention takes the causal mask only");
        Pending p = pend(s);
        if (p.causal) refuse(n, "masks attention's scores twice");
        p.causal = true;
        set(n.output(0), scores.shape, p);
        return true;
    }
    if ((op == "Softmax") && is(0, "attn.scores")) {
        check_known_attrs(n, {"axis"});
        const Value& x = value(n.input(0));
        if (attr_int(n, "axis", -1) != -1 && attr_int(n, "axis", -1) != 3)
            refuse(n, "normalises attention's scores over an axis other than the last");
        set(n.output(0), x.shape, step(x.pending, "attn.probs"));
        return true;
    }
    return false;
}

// The projection MatMul(merged, W [C, C]) [+ Add(bias)] closes the pattern: one attention layer
// reading what the q, k, v linear read, with that linear's weights as c_attn's.
void Importer::attention(const onnx::NodeProto& n, const Pending& p, const std::string& merged) {
    const Value& m = value(merged);
    const HostTensor& w = constant(n, 1, "B");
    const int64_t c = m.shape[2];
    if (!w.is_float || w.dims != std::vector<int64_t>{c, c})
        refuse(n, "attention's projection " + shape_text(w.dims) + " is not [" + std::to_string(c) + ", " +
                      std::to_string(c) + "]");
    const int64_t head = c / p.heads;
    if (std::fabs(p.scale * std::sqrt(static_cast<double>(head)) - 1) > 1e-5)
        refuse(n, "attention's scores are scaled by " + toml_float(p.scale) +
                      "; xylem's attention scales by 1/sqrt(head size) = " +
                      toml_float(1 / std::sqrt(static_cast<double>(head))));
    const Value& qkv = value(p.of);
    const LayerOut* lin = nullptr;
    for (const LayerOut& l : layers_)
        if (l.name == qkv.node) lin = &l;
    if (!lin || lin->type != "linear") refuse(n, "attention's q, k, v do not come from one linear layer");
    const bool qkv_bias = out_.params.count(lin->name + ".bias") > 0;
    // The projection's bias: the Add after it, when it is the MatMul's one reader.
    std::string output = n.output(0);
    const HostTensor* bias = nullptr;
    const int j = sole_reader(output);
    if (j >= 0 && g_.node(j).op_type() == "Add" && g_.node(j).input_size() == 2) {
        const auto& add = g_.node(j);
        const std::string& other = add.input(0) == output ? add.input(1) : add.input(0);
        const Value& b = value(other);
        if (b.is_const && b.c.is_float && b.c.numel() == c && (b.c.dims == std::vector<int64_t>{c})) {
            bias = &b.c;
            absorbed_.insert(j);
            output = add.output(0);
        }
    }
    if (qkv_bias != (bias != nullptr))
        refuse(n,
               "attention's q, k, v linear and its projection differ in having a bias; xylem's attention has both or "
               "neither");
    // The layer's name: the node's scope ("/h.0/attn/c_proj/MatMul" -> "h_0_attn").
    std::string scope = n.name();
    for (int k = 0; k < 2 && scope.rfind('/') != std::string::npos && scope.rfind('/') > 0; ++k)
        scope = scope.substr(0, scope.rfind('/'));
    onnx::NodeProto named = n;
    named.set_name(scope == n.name() ? "attention" : scope);
    const std::string name = layer_name(named, "");
    param(name, "c_attn.weight", {3 * c, c}, out_.params.at(lin->name + ".weight").values);
    if (qkv_bias) param(name, "c_attn.bias", {3 * c}, out_.params.at(lin->name + ".bias").values);
    std::vector<float> wt(static_cast<size_t>(c * c));
    for (int64_t o = 0; o < c; ++o)
        for (int64_t i = 0; i < c; ++i) wt[static_cast<size_t>(o * c + i)] = w.f[static_cast<size_t>(i * c + o)];
    param(name, "c_proj.weight", {c, c}, std::move(wt));
    if (bias) param(name, "c_proj.bias", {c}, bias->f);
    LayerOut l{"attention",
               name,
               lin->inputs,
               {{"heads", std::to_string(p.heads)},
                {"causal", p.causal ? "true" : "false"},
                {"bias", qkv_bias ? "true" : "false"}}};
    emit(std::move(l), n, m.shape, output);
}

}  // namespace xylem::onnx_import::detail
