// Constant folding: the nodes whose inputs are all constants (shape subgraphs: Shape, Gather,
// Unsqueeze, Concat, Reshape, Cast, ...) become constants at import (importer_impl.h).
#include <algorithm>
#include <cmath>
#include <set>

#include "importer_impl.h"
#include "xylem/error.h"

namespace xylem::onnx_import::detail {

namespace {
// The most elements a folded elementwise op may produce (a hostile broadcast must not allocate
// gigabytes).
constexpr int64_t kMaxFolded = int64_t{1} << 24;

// NumPy's broadcast of `ts` (each a tensor's dims): the output's dims, or an empty optional when
// they do not broadcast.
bool broadcast_dims(const std::vector<const HostTensor*>& ts, std::vector<int64_t>& out) {
    size_t rank = 0;
    for (const HostTensor* t : ts) rank = std::max(rank, t->dims.size());
    out.assign(rank, 1);
    for (const HostTensor* t : ts)
        for (size_t k = 0; k < t->dims.size(); ++k) {
            int64_t& o = out[rank - t->dims.size() + k];
            const int64_t d = t->dims[k];
            if (d == o || d == 1) continue;
            if (o != 1) return false;
            o = d;
        }
    return true;
}

// The flat index into `t` of the output element `k` of dims `out` (t broadcast to out).
int64_t source_index(const HostTensor& t, const std::vector<int64_t>& out, int64_t k) {
    int64_t idx = 0, stride = 1;
    const size_t off = out.size() - t.dims.size();
    for (size_t a = out.size(); a-- > 0;) {
        const int64_t e = k % out[a];
        k /= out[a];
        if (a < off) continue;
        const int64_t d = t.dims[a - off];
        if (d != 1) idx += e * stride;
        stride *= d;
    }
    return idx;
}

double value_at(const HostTensor& t, int64_t i) {
    return t.is_float ? static_cast<double>(t.f[static_cast<size_t>(i)])
                      : static_cast<double>(t.i[static_cast<size_t>(i)]);
}
}  // namespace

void Importer::fold(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    auto fail = [&](const std::string& why) { refuse(n, why); };
    HostTensor r;
    auto ints_of = [&](size_t k, const char* what) -> const HostTensor& {
        const HostTensor& t = constant(n, k, what);
        if (t.is_float) refuse(n, std::string("its ") + what + " is float; xylem folds integer shape values");
        return t;
    };
    if (op == "Constant") {
        check_known_attrs(n, {"value", "value_int", "value_ints", "value_float", "value_floats"});
        if (n.attribute_size() != 1) refuse(n, "needs exactly one value attribute");
        const auto& a = n.attribute(0);
        if (a.name() == "value") {
            if (a.type() != onnx::AttributeProto::TENSOR) refuse(n, "attribute 'value' is not a tensor");
            r = decode_tensor(a.t(), dir_, source_ + ": " + label(n) + " value");
        } else if (a.name() == "value_int") {
            r.is_float = false;
            r.i = {attr_int(n, "value_int", 0)};
        } else if (a.name() == "value_ints") {
            r.is_float = false;
            r.i = attr_ints(n, "value_ints", {});
            r.dims = {static_cast<int64_t>(r.i.size())};
        } else if (a.name() == "value_float") {
            r.f = {attr_float(n, "value_float", 0)};
        } else {
            const auto* fa = attr(n, "value_floats", onnx::AttributeProto::FLOATS);
            r.f.assign(fa->floats().begin(), fa->floats().end());
            r.dims = {static_cast<int64_t>(r.f.size())};
        }
    } else if (op == "Shape") {
        check_known_attrs(n, {"start", "end"});
        const Value& x = value(input_of(n, 0));
        const std::vector<int64_t> s = x.is_const ? x.c.dims : x.shape;
        const int64_t rank = static_cast<int64_t>(s.size());
        int64_t start = attr_int(n, "start", 0), end = attr_int(n, "end", rank);
        if (start < 0) start += rank;
        if (end < 0) end += rank;
        start = std::clamp<int64_t>(start, 0, rank);
        end = std::clamp<int64_t>(end, 0, rank);
        r.is_float = false;
        for (int64_t k = start; k < end; ++k) r.i.push_back(s[static_cast<size_t>(k)]);
        r.dims = {static_cast<int64_t>(r.i.size())};
    } else if (op == "Gather") {
        check_known_attrs(n, {"axis"});
        const HostTensor& data = constant(n, 0, "data");
        const HostTensor& idx = ints_of(1, "indices");
        if (data.dims.empty()) refuse(n, "gathers from a scalar");
        if (normalize_axis(attr_int(n, "axis", 0), data.dims.size(), fail) != 0)
            refuse(n, "xylem folds Gather along axis 0 only");
        const int64_t len = data.dims[0], row = len ? data.numel() / len : 0;
        r.is_float = data.is_float;
        r.dims = idx.dims;
        r.dims.insert(r.dims.end(), data.dims.begin() + 1, data.dims.end());
        if (static_cast<int64_t>(idx.i.size()) * row > kMaxFolded) refuse(n, "would fold to more than 2^24 elements");
        for (int64_t k : idx.i) {
            if (k < -len || k >= len)
                refuse(n, "index " + std::to_string(k) + " is out of range for " + std::to_string(len) + " values");
            const size_t at = static_cast<size_t>((k < 0 ? k + len : k) * row);
            if (data.is_float)
                r.f.insert(r.f.end(), data.f.begin() + static_cast<long>(at),
                           data.f.begin() + static_cast<long>(at + static_cast<size_t>(row)));
            else
                r.i.insert(r.i.end(), data.i.begin() + static_cast<long>(at),
                           data.i.begin() + static_cast<long>(at + static_cast<size_t>(row)));
        }
    } else if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape") {
        const HostTensor& data = constant(n, 0, "data");
        std::vector<int64_t> dims = data.dims;
        if (op == "Reshape") {
            check_known_attrs(n, {"allowzero"});
            const HostTensor& shape = ints_of(1, "shape");
            dims = reshape_dims(n, shape.i, data.dims, attr_int(n, "allowzero", 0) != 0, true, shape.i);
        } else {
            check_known_attrs(n, {});
            std::vector<int64_t> axes;
            if (n.input_size() > 1 && !n.input(1).empty()) axes = ints_of(1, "axes").i;
            if (op == "Unsqueeze") {
                const size_t rank = dims.size() + axes.size();
                std::vector<int64_t> norm;
                for (int64_t a : axes) norm.push_back(normalize_axis(a, rank, fail));
                std::sort(norm.begin(), norm.end());
                if (std::adjacent_find(norm.begin(), norm.end()) != norm.end()) refuse(n, "repeats an axis");
                for (int64_t a : norm) {
                    if (a > static_cast<int64_t>(dims.size()))
                        refuse(n, "axis " + std::to_string(a) + " is out of range");
                    dims.insert(dims.begin() + a, 1);
                }
            } else {
                std::vector<int64_t> keep;
                std::set<int64_t> drop;
                for (int64_t a : axes) drop.insert(normalize_axis(a, dims.size(), fail));
                for (size_t k = 0; k < dims.size(); ++k) {
                    const bool squeeze = axes.empty() ? dims[k] == 1 : drop.count(static_cast<int64_t>(k)) > 0;
                    if (squeeze && dims[k] != 1)
                        refuse(n, "squeezes axis " + std::to_string(k) + " of size " + std::to_string(dims[k]));
                    if (!squeeze) keep.push_back(dims[k]);
                }
                dims = keep;
            }
        }
        r = data;
        r.dims = dims;
        if (r.numel() != data.numel())
            refuse(n, "the new shape " + shape_text(dims) + " does not hold the data's values");
    } else if (op == "Concat") {
        check_known_attrs(n, {"axis"});
        r = constant(n, 0, "first");
        if (r.dims.size() != 1) refuse(n, "xylem folds Concat of 1-D constants only");
        for (int k = 1; k < n.input_size(); ++k) {
            const HostTensor& t = constant(n, static_cast<size_t>(k), "next");
            if (t.dims.size() != 1 || t.is_float != r.is_float)
                refuse(n, "xylem folds Concat of 1-D constants of one type only");
            r.f.insert(r.f.end(), t.f.begin(), t.f.end());
            r.i.insert(r.i.end(), t.i.begin(), t.i.end());
        }
        r.dims = {static_cast<int64_t>(r.is_float ? r.f.size() : r.i.size())};
    } else if (op == "Cast") {
        check_known_attrs(n, {"to", "saturate"});
        const HostTensor& data = constant(n, 0, "data");
        const int64_t to = attr_int(n, "to", 0);
        r.dims = data.dims;
        if (to == onnx::TensorProto::FLOAT) {
            r.is_float = true;
            if (data.is_float)
                r.f = data.f;
            else
                for (int64_t v : data.i) r.f.push_back(static_cast<float>(v));
        } else if (to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32) {
            r.is_float = false;
            if (!data.is_float)
                r.i = data.i;
            else
                for (float v : data.f) r.i.push_back(static_cast<int64_t>(v));
        } else if (to == onnx::TensorProto::BOOL) {
            r.is_float = false;
            if (!data.is_float)
                for (int64_t v : data.i) r.i.push_back(v != 0);
            else
                for (float v : data.f) r.i.push_back(v != 0.f);
        } else {
            refuse(n, "casts to type " + std::to_string(to) + "; xylem folds casts to float, int32 and int64");
        }
    } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Equal" ||
               op == "Where" || op == "Sqrt" || op == "Erf") {
        // Elementwise on constants, NumPy's broadcasting: integers stay integers (shape
        // arithmetic; Div truncates as ONNX's integer Div), anything with a float is float, Equal
        // gives booleans (0 or 1) and Where picks by a boolean.
        check_known_attrs(n, {});
        const int arity = op == "Where" ? 3 : (op == "Sqrt" || op == "Erf") ? 1 : 2;
        std::vector<const HostTensor*> in;
        for (int k = 0; k < arity; ++k) in.push_back(&constant(n, static_cast<size_t>(k), "operand"));
        if (!broadcast_dims(in, r.dims)) refuse(n, "its operands' shapes do not broadcast");
        const int64_t total = r.numel();
        if (total > kMaxFolded) refuse(n, "would fold to more than 2^24 elements");
        const bool is_float =
            op == "Where"   ? (in[1]->is_float || in[2]->is_float)
            : op == "Equal" ? false
                            : std::any_of(in.begin(), in.end(), [](const HostTensor* t) { return t->is_float; }) ||
                                  op == "Sqrt" || op == "Erf";
        r.is_float = is_float;
        for (int64_t k = 0; k < total; ++k) {
            double v[3] = {0, 0, 0};
            for (int j = 0; j < arity; ++j)
                v[j] = value_at(*in[static_cast<size_t>(j)], source_index(*in[static_cast<size_t>(j)], r.dims, k));
            double out = 0;
            if (op == "Add")
                out = v[0] + v[1];
            else if (op == "Sub")
                out = v[0] - v[1];
            else if (op == "Mul")
                out = v[0] * v[1];
            else if (op == "Div") {
                if (!is_float && v[1] == 0) refuse(n, "divides an integer by zero");
                out = is_float ? static_cast<double>(static_cast<float>(v[0]) / static_cast<float>(v[1]))
                               : std::trunc(v[0] / v[1]);
            } else if (op == "Pow")
                out = std::pow(v[0], v[1]);
            else if (op == "Equal")
                out = v[0] == v[1];
            else if (op == "Where")
                out = v[0] != 0 ? v[1] : v[2];
            else if (op == "Sqrt")
                out = std::sqrt(v[0]);
            else
                out = std::erf(v[0]);
            if (is_float)
                r.f.push_back(static_cast<float>(out));
            else
                r.i.push_back(static_cast<int64_t>(out));
        }
    } else if (op == "Range") {
        check_known_attrs(n, {});
        const HostTensor &a = constant(n, 0, "start"), &b = constant(n, 1, "limit"), &d = constant(n, 2, "delta");
        if (a.numel() != 1 || b.numel() != 1 || d.numel() != 1) refuse(n, "its start, limit and delta must be scalars");
        const double start = value_at(a, 0), limit = value_at(b, 0), delta = value_at(d, 0);
        if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
            refuse(n, "delta 0 or a bound not finite");
        const double count = std::max(0.0, std::ceil((limit - start) / delta));
        if (count > static_cast<double>(kMaxFolded)) refuse(n, "would fold to more than 2^24 elements");
        r.is_float = a.is_float || b.is_float || d.is_float;
        r.dims = {static_cast<int64_t>(count)};
        for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) {
            const double v = start + static_cast<double>(k) * delta;
            if (r.is_float)
                r.f.push_back(static_cast<float>(v));
            else
                r.i.push_back(static_cast<int64_t>(v));
        }
    } else if (op == "Slice") {
        const HostTensor& data = constant(n, 0, "data");
        const auto ranges = slice_ranges(n, data.dims);
        std::vector<int64_t> stride(data.dims.size(), 1);
        for (size_t a = data.dims.size(); a-- > 1;) stride[a - 1] = stride[a] * data.dims[a];
        r.is_float = data.is_float;
        for (const auto& [b, e] : ranges) r.dims.push_back(e - b);
        for (int64_t k = 0, total = r.numel(); k < total; ++k) {
            int64_t rest = k, off = 0;
            for (size_t a = data.dims.size(); a-- > 0;) {
                const int64_t e = r.dims[a] ? rest % r.dims[a] : 0;
                rest = r.dims[a] ? rest / r.dims[a] : 0;
                off += (ranges[a].first + e) * stride[a];
            }
            if (data.is_float)
                r.f.push_back(data.f[static_cast<size_t>(off)]);
            else
                r.i.push_back(data.i[static_cast<size_t>(off)]);
        }
    } else if (op == "Identity" || op == "Dropout") {
        r = value(input_of(n, 0)).c;
    } else {
        refuse(n, "has only constant inputs, and xylem folds this op only on the model's data");
    }
    ++folded_;
    Value v;
    v.is_const = true;
    v.c = std::move(r);
    values_[n.output(0)] = std::move(v);
}

}  // namespace xylem::onnx_import::detail
