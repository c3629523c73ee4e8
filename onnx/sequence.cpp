// The ops of sequence models (importer_impl.h): LSTM -> lstm, GRU -> gru, the Transposes torch puts around it
// (batch-first [N, T, F] to ONNX's time-major [T, N, F] and back), its zero initial states
// (ConstantOfShape of the batch's shape, then Slice), and Slice or Gather of a range of the
// model's data (y[:, -1]) -> slice.
#include <algorithm>
#include <cmath>

#include "importer_impl.h"
#include "xylem/error.h"

namespace xylem::onnx_import::detail {

namespace {
// The largest constant ConstantOfShape may fold (a hostile shape must not allocate gigabytes).
constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;
}  // namespace

std::vector<std::pair<int64_t, int64_t>> Importer::slice_ranges(const onnx::NodeProto& n,
                                                                const std::vector<int64_t>& dims) {
    check_known_attrs(n, {});
    auto ints = [&](int k, const char* what) -> std::vector<int64_t> {
        const HostTensor& t = constant(n, static_cast<size_t>(k), what);
        if (t.is_float || t.dims.size() != 1) refuse(n, std::string("its ") + what + " must be a 1-D integer constant");
        return t.i;
    };
    const std::vector<int64_t> starts = ints(1, "starts"), ends = ints(2, "ends");
    if (starts.size() != ends.size())
        refuse(n, "has " + std::to_string(starts.size()) + " starts and " + std::to_string(ends.size()) + " ends");
    std::vector<int64_t> axes;
    if (n.input_size() > 3 && !n.input(3).empty())
        axes = ints(3, "axes");
    else
        for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
    if (axes.size() != starts.size())
        refuse(n, "has " + std::to_string(axes.size()) + " axes for " + std::to_string(starts.size()) + " starts");
    if (n.input_size() > 4 && !n.input(4).empty())
        for (int64_t s : ints(4, "steps"))
            if (s != 1) refuse(n, "step " + std::to_string(s) + ": xylem slices with step 1 only");
    auto fail = [&](const std::string& why) { refuse(n, why); };
    std::vector<std::pair<int64_t, int64_t>> r;
    for (int64_t d : dims) r.emplace_back(0, d);
    std::vector<bool> seen(dims.size(), false);
    for (size_t k = 0; k < axes.size(); ++k) {
        const size_t a = static_cast<size_t>(normalize_axis(axes[k], dims.size(), fail));
        if (seen[a]) refuse(n, "repeats axis " + std::to_string(a));
        seen[a] = true;
        const int64_t len = dims[a];
        if (len == kBatchMark) {  // the symbolic batch: only the whole of it
            if (starts[k] != 0 || ends[k] < kMaxDim) refuse(n, "slices the batch axis");
            continue;
        }
        auto at = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + len : v, 0, len); };
        r[a] = {at(starts[k]), std::max(at(starts[k]), at(ends[k]))};
        if (r[a].second == r[a].first) refuse(n, "leaves axis " + std::to_string(a) + " empty");
    }
    return r;
}

void Importer::constant_of_shape(const onnx::NodeProto& n) {
    check_known_attrs(n, {"value"});
    const HostTensor& s = constant(n, 0, "shape");
    if (s.is_float || s.dims.size() != 1) refuse(n, "its shape must be a 1-D integer constant");
    float fill = 0.f;
    bool is_float = true;
    if (const auto* a = attr(n, "value", onnx::AttributeProto::TENSOR)) {
        const HostTensor v = decode_tensor(a->t(), dir_, source_ + ": " + label(n) + " value");
        if (v.numel() != 1) refuse(n, "its value must hold one element");
        is_float = v.is_float;
        fill = v.is_float ? v.f[0] : static_cast<float>(v.i[0]);
    }
    bool batch = false;
    int64_t numel = 1;
    for (int64_t d : s.i) {
        if (d == kBatchMark) {
            batch = true;
            continue;
        }
        if (d < 0 || d > kMaxDim || __builtin_mul_overflow(numel, d, &numel) || numel > kMaxFoldedElements)
            refuse(n,
                   "shape " + shape_text(s.i) + " is out of range for a constant xylem folds (at most 2^24 elements)");
    }
    Value v;
    if (batch) {  // zeros of the batch's shape: an LSTM's initial state
        if (fill != 0.f || !is_float)
            refuse(n, "fills a tensor of the batch's shape with " + toml_float(fill) + "; xylem takes zeros only");
        v.zeros = true;
        v.shape = s.i;
    } else {
        v.is_const = true;
        v.c.dims = s.i;
        v.c.is_float = is_float;
        if (is_float)
            v.c.f.assign(static_cast<size_t>(numel), fill);
        else
            v.c.i.assign(static_cast<size_t>(numel), static_cast<int64_t>(fill));
    }
    ++folded_;
    values_[n.output(0)] = std::move(v);
}

void Importer::slice(const onnx::NodeProto& n) {
    const Value& x = value(input_of(n, 0));
    const auto r = slice_ranges(n, x.shape);
    if (x.zeros) {  // zeros stay zeros
        Value v = x;
        for (size_t a = 0; a < r.size(); ++a)
            if (x.shape[a] != kBatchMark) v.shape[a] = r[a].second - r[a].first;
        values_[n.output(0)] = v;
        return;
    }
    if (x.layout != Value::kBatchMajor) refuse(n, "slices a time-major tensor; xylem slices [batch, ...] tensors only");
    int axis = -1;
    for (size_t a = 0; a < r.size(); ++a)
        if (r[a] != std::make_pair(int64_t{0}, x.shape[a])) {
            if (axis >= 0) refuse(n, "slices two axes; xylem's slice takes one");
            axis = static_cast<int>(a);
        }
    if (axis < 0) {  // the whole tensor
        values_[n.output(0)] = x;
        out_.notes.push_back("skipped " + label(n) + " (it keeps every element)");
        return;
    }
    if (axis == 0) refuse(n, "slices the batch axis");
    std::vector<int64_t> shape = x.shape;
    shape[static_cast<size_t>(axis)] = r[static_cast<size_t>(axis)].second - r[static_cast<size_t>(axis)].first;
    LayerOut l{"slice",
               layer_name(n, ""),
               {use(input_of(n, 0), n)},
               {{"axis", std::to_string(axis)},
                {"start", std::to_string(r[static_cast<size_t>(axis)].first)},
                {"end", std::to_string(r[static_cast<size_t>(axis)].second)}}};
    emit(std::move(l), n, shape, n.output(0));
}

// Gather along axis >= 1 of the model's data by constant indices: a scalar (the axis dropped) or a
// run of consecutive ascending indices -> slice (+ reshape).
void Importer::gather_data(const onnx::NodeProto& n) {
    check_known_attrs(n, {"axis"});
    const Value& x = value(input_of(n, 0));
    const HostTensor& idx = constant(n, 1, "indices");
    if (idx.is_float) refuse(n, "its indices are float");
    if (x.layout != Value::kBatchMajor) refuse(n, "gathers from a time-major tensor");
    auto fail = [&](const std::string& why) { refuse(n, why); };
    const int64_t axis = normalize_axis(attr_int(n, "axis", 0), x.shape.size(), fail);
    if (axis == 0)
        refuse(n, "gathers along the batch axis of the model's data (an embedding's table must be the constant data)");
    if (idx.dims.size() > 1 || idx.i.empty())
        refuse(n, "xylem gathers a scalar index or a 1-D run of indices of the model's data");
    const int64_t len = x.shape[static_cast<size_t>(axis)];
    std::vector<int64_t> at;
    for (int64_t k : idx.i) {
        if (k < -len || k >= len)
            refuse(n, "index " + std::to_string(k) + " is out of range for " + std::to_string(len));
        at.push_back(k < 0 ? k + len : k);
    }
    for (size_t k = 1; k < at.size(); ++k)
        if (at[k] != at[k - 1] + 1)
            refuse(n, "indices " + shape_text(idx.i) +
                          " are not a run of consecutive ascending indices; xylem's slice takes a range");
    std::vector<int64_t> shape = x.shape;
    shape[static_cast<size_t>(axis)] = static_cast<int64_t>(at.size());
    LayerOut l{"slice",
               layer_name(n, ""),
               {use(input_of(n, 0), n)},
               {{"axis", std::to_string(axis)},
                {"start", std::to_string(at.front())},
                {"end", std::to_string(at.back() + 1)}}};
    if (!idx.dims.empty()) {
        emit(std::move(l), n, shape, n.output(0));
        return;
    }
    const std::string sliced = n.output(0) + "#slice";
    emit(std::move(l), n, shape, sliced);
    shape.erase(shape.begin() + axis);
    reshape_like(n, shape, sliced);
}

void Importer::transpose(const onnx::NodeProto& n) {
    check_known_attrs(n, {"perm"});
    const Value& x = value(input_of(n, 0));
    std::vector<int64_t> perm = attr_ints(n, "perm", {});
    if (perm.empty())
        for (size_t k = x.shape.size(); k-- > 0;) perm.push_back(static_cast<int64_t>(k));
    // A perm that keeps the batch first reorders each sample's axes: xylem's transpose layer
    // (ShuffleNet's channel shuffle, [N, g, C/g, H, W] with perm [0, 2, 1, 3, 4]).
    if (!perm.empty() && perm[0] == 0 && x.layout == Value::kBatchMajor && !x.zeros && !x.is_const &&
        perm.size() == x.shape.size()) {
        std::vector<int64_t> sample_perm, shape{x.shape[0]};
        for (size_t i = 1; i < perm.size(); ++i) {
            if (perm[i] < 1 || perm[i] >= static_cast<int64_t>(perm.size()))
                refuse(n, "perm " + shape_text(perm) + " is not a permutation of the axes of " + shape_text(x.shape));
            sample_perm.push_back(perm[i] - 1);
            shape.push_back(x.shape[static_cast<size_t>(perm[i])]);
        }
        std::vector<int64_t> sorted = sample_perm;
        std::sort(sorted.begin(), sorted.end());
        for (size_t i = 0; i < sorted.size(); ++i)
            if (sorted[i] != static_cast<int64_t>(i))
                refuse(n, "perm " + shape_text(perm) + " is not a permutation of the axes of " + shape_text(x.shape));
        if (x.shape.size() > XYLEM_MAX_DIMS)
            refuse(n, "transposes a tensor of " + std::to_string(x.shape.size()) + " axes (xylem's limit: " +
                          std::to_string(XYLEM_MAX_DIMS) + ")");
        LayerOut l{"transpose", layer_name(n, ""), {use(input_of(n, 0), n)}, {{"perm", toml_ints(sample_perm)}}};
        emit(std::move(l), n, shape, n.output(0));
        return;
    }
    const bool swap01 = perm == std::vector<int64_t>{1, 0, 2} && x.shape.size() == 3;
    if (!swap01 || x.layout == Value::kLstmY || x.zeros)
        refuse(n, "perm " + shape_text(perm) + " of " + shape_text(x.shape) +
                      ": xylem imports a Transpose that keeps the batch first, and the [1, 0, 2] of a [batch, time, "
                      "features] sequence into an LSTM and back");
    Value v = x;
    std::swap(v.shape[0], v.shape[1]);
    v.layout = x.layout == Value::kBatchMajor ? Value::kTimeMajor : Value::kBatchMajor;
    values_[n.output(0)] = v;
    out_.notes.push_back("skipped " + label(n) + " (xylem's lstm takes and gives [batch, time, features])");
}

// ONNX's LSTM and GRU (forward, default activations, no peepholes or clip, zero initial states)
// -> lstm or gru of one level. Gate blocks are reordered to PyTorch's (xylem's): LSTM i, o, f, c
// -> i, f, g, o; GRU z, r, h -> r, z, n. B is [Wb, Rb]: bias_ih and bias_hh. A GRU must have
// linear_before_reset = 1 (PyTorch's, r applied to R h + Rb; ONNX's default 0 is another cell).
void Importer::recurrent(const onnx::NodeProto& n, bool gru) {
    if (gru)
        check_known_attrs(n, {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
                              "layout", "linear_before_reset"});
    else
        check_known_attrs(n, {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
                              "input_forget", "layout"});
    const int64_t gates = gru ? 3 : 4;
    const char* type = gru ? "gru" : "lstm";
    if (attr(n, "activation_alpha", onnx::AttributeProto::FLOATS) ||
        attr(n, "activation_beta", onnx::AttributeProto::FLOATS))
        refuse(n, std::string("activation_alpha/beta: xylem's ") + type + " has the default activations only");
    if (const auto* a = attr(n, "activations", onnx::AttributeProto::STRINGS)) {
        const std::vector<std::string> acts(a->strings().begin(), a->strings().end());
        const std::vector<std::string> want =
            gru ? std::vector<std::string>{"Sigmoid", "Tanh"} : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
        if (acts != want) refuse(n, "activations other than the default have no xylem equivalent");
    }
    if (attr(n, "clip", onnx::AttributeProto::FLOAT)) refuse(n, "clip has no xylem equivalent");
    if (attr_string(n, "direction", "forward") != "forward")
        refuse(n, "direction " + attr_string(n, "direction", "") + ": xylem's " + type + " runs forward only");
    if (!gru && attr_int(n, "input_forget", 0)) refuse(n, "input_forget = 1 has no xylem equivalent");
    if (gru && attr_int(n, "linear_before_reset", 0) != 1)
        refuse(n,
               "linear_before_reset = 0: xylem's gru is PyTorch's (the reset gate applied after R h + Rb, "
               "linear_before_reset = 1)");
    if (attr_int(n, "layout", 0))
        refuse(n, "layout = 1 (batch-first X): xylem imports torch's time-major form (layout 0)");
    const int64_t h = attr_int(n, "hidden_size", 0);
    if (h < 1 || h > kMaxDim / 8) refuse(n, "hidden_size " + std::to_string(h) + " is missing or out of range");
    const Value& x = value(input_of(n, 0));
    if (x.is_const || x.zeros || x.layout != Value::kTimeMajor || x.shape.size() != 3)
        refuse(n,
               "its X must be the model's [batch, time, features] data transposed to ONNX's [time, batch, features] "
               "(torch's export of a batch-first nn.LSTM or nn.GRU); got " +
                   shape_text(x.shape));
    const int64_t time = x.shape[0], batch = x.shape[1], features = x.shape[2], g = gates * h;
    const HostTensor& w = constant(n, 1, "W");
    const HostTensor& r = constant(n, 2, "R");
    if (!w.is_float || w.dims != std::vector<int64_t>{1, g, features})
        refuse(n,
               "W " + shape_text(w.dims) + " is not [1, " + std::to_string(g) + ", " + std::to_string(features) + "]");
    if (!r.is_float || r.dims != std::vector<int64_t>{1, g, h})
        refuse(n, "R " + shape_text(r.dims) + " is not [1, " + std::to_string(g) + ", " + std::to_string(h) + "]");
    std::vector<float> b(static_cast<size_t>(2 * g), 0.f);
    if (n.input_size() > 3 && !n.input(3).empty()) {
        const HostTensor& bt = constant(n, 3, "B");
        if (!bt.is_float || bt.dims != std::vector<int64_t>{1, 2 * g})
            refuse(n, "B " + shape_text(bt.dims) + " is not [1, " + std::to_string(2 * g) + "]");
        b = bt.f;
    }
    if (n.input_size() > 4 && !n.input(4).empty()) {
        const HostTensor& lens = constant(n, 4, "sequence_lens");
        for (int64_t l : lens.i)
            if (lens.is_float || l != time)
                refuse(n, "sequence_lens differ from the sequence's length: xylem runs whole sequences");
    }
    for (int k = 5; k <= (gru ? 5 : 6); ++k) {
        if (n.input_size() <= k || n.input(k).empty()) continue;
        const Value& s = value(n.input(k));
        bool zero = s.zeros;
        if (s.is_const)
            zero = s.c.is_float && std::all_of(s.c.f.begin(), s.c.f.end(), [](float v) { return v == 0.f; });
        if (!zero)
            refuse(n, std::string(k == 5 ? "initial_h" : "initial_c") + " is not zeros: xylem's " + type +
                          " starts from zeros");
        if (s.shape.size() != 3 || s.shape[0] != 1 || s.shape[2] != h)
            refuse(n, "its initial state " + shape_text(s.shape) + " is not [1, batch, hidden]");
    }
    if (!gru && n.input_size() > 7 && !n.input(7).empty()) refuse(n, "peephole weights P have no xylem equivalent");
    // xylem's block k comes from ONNX's block from[k].
    const std::vector<int64_t> from = gru ? std::vector<int64_t>{1, 0, 2} : std::vector<int64_t>{0, 2, 3, 1};
    auto reorder = [&](const float* src, int64_t cols) {
        std::vector<float> dst(static_cast<size_t>(g * cols));
        for (int64_t k = 0; k < gates; ++k)
            std::copy(src + from[static_cast<size_t>(k)] * h * cols,
                      src + (from[static_cast<size_t>(k)] + 1) * h * cols, dst.begin() + k * h * cols);
        return dst;
    };
    const std::string name = layer_name(n, "");
    param(name, "weight_ih_l0", {g, features}, reorder(w.f.data(), features));
    param(name, "weight_hh_l0", {g, h}, reorder(r.f.data(), h));
    param(name, "bias_ih_l0", {g}, reorder(b.data(), 1));
    param(name, "bias_hh_l0", {g}, reorder(b.data() + g, 1));
    LayerOut l{type, name, {x.node}, {{"hidden", std::to_string(h)}}};
    emit(std::move(l), n, {batch, time, h}, n.output(0));
    Value& y = values_[n.output(0)];
    y.shape = {time, 1, batch, h};
    y.layout = Value::kLstmY;
}

}  // namespace xylem::onnx_import::detail
