// add, mul and concat: merges of several inputs, written with the core's add, mul, reduce, copy
// and gather_rows ops (merge.h).
#include "xylem/layers/merge.h"

#include <algorithm>
#include <limits>

#include "xylem/error.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {
namespace {

std::string named(const Layer& l, size_t k) {
    return k < l.input_names().size() ? "'" + l.input_names()[k] + "'" : "input " + std::to_string(k);
}

}  // namespace

const Tensor& RowIndexCache::get(Device& dev, int64_t batch, const std::function<std::vector<int32_t>(int64_t)>& make) {
    auto it = by_batch_.find(batch);
    if (it != by_batch_.end()) return it->second;
    const std::vector<int32_t> rows = make(batch);
    Tensor t({static_cast<int64_t>(rows.size())}, DType::I32);
    std::copy(rows.begin(), rows.end(), t.host_write<int32_t>());
    t.upload(dev);  // once per batch size: an explicit transfer
    return by_batch_.emplace(batch, std::move(t)).first->second;
}

const Tensor& RowIndexCache::spread(Device& dev, int64_t batch, int64_t per_sample, int64_t copies) {
    return get(dev, batch, [per_sample, copies](int64_t b) {
        std::vector<int32_t> rows(static_cast<size_t>(b * per_sample * copies));
        for (size_t r = 0; r < rows.size(); ++r) rows[r] = static_cast<int32_t>(static_cast<int64_t>(r) / copies);
        return rows;
    });
}

namespace {

void check_batches(const Layer& l, const Tensor& a, const Tensor& b) {
    if (a.shape().empty() || b.shape().empty() || a.dim(0) != b.dim(0))
        throw Error(l.label() + ": the inputs' batches differ: " + to_string(a.shape()) + " and " + to_string(b.shape()));
}

}  // namespace

// ---- add ----

Shape Add::output_shape_of(const std::vector<Shape>& in) const {
    check_input_count(in.size());
    const Shape& a = in[0];
    const Shape& b = in[1];
    const bool trailing = b.size() <= a.size() && std::equal(b.begin(), b.end(), a.end() - static_cast<std::ptrdiff_t>(b.size()));
    if (!trailing)
        throw Error(label() + (sign_ > 0 ? ": cannot add " : ": cannot subtract from ") + named(*this, 0) + " " +
                    to_string(a) + (sign_ > 0 ? " and " : " ") + named(*this, 1) + " " + to_string(b) +
                    " per sample: the second must have the first's shape or its trailing part");
    return a;
}

void Add::bind_inputs(Device&, const std::vector<Shape>& in, std::mt19937_64&) {
    output_shape_of(in);
    b_sample_ = in[1];
    const int64_t cols = numel(b_sample_);
    repeat_ = cols ? numel(in[0]) / cols : 1;
}

const Tensor& Add::forward_inputs(Device& dev, const std::vector<const Tensor*>& xs, bool) {
    check_input_count(xs.size());
    const Tensor& a = *xs[0];
    const Tensor& b = *xs[1];
    check_batches(*this, a, b);
    const Shape a_sample(a.shape().begin() + 1, a.shape().end());
    b_sample_.assign(b.shape().begin() + 1, b.shape().end());
    output_shape_of({a_sample, b_sample_});
    const int64_t n = a.dim(0), cols = numel(b_sample_);
    repeat_ = cols ? numel(a_sample) / cols : 1;
    ensure_output(y_, a.shape(), dev);
    if (repeat_ == 1) {
        ops::add(dev, 1.0f, a, sign_, b.reshaped(a.shape()), y_);
        return y_;
    }
    // Spread b over a's rows (sample n's b for each of its repeat_ rows), then add elementwise.
    const Tensor& idx = spread_.spread(dev, n, 1, repeat_);
    ensure(b_wide_, {n * repeat_, cols}, dev);
    ops::gather_rows(dev, b.reshaped({n, cols}), idx, b_wide_);
    ops::add(dev, 1.0f, a, sign_, b_wide_.reshaped(a.shape()), y_);
    return y_;
}

void Add::backward_inputs(Device& dev, const Tensor& dy, const std::vector<bool>& need_dx,
                          std::vector<const Tensor*>& dxs) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    dxs.assign(2, nullptr);
    if (need_dx[0]) dxs[0] = &dy;  // d(a +- b)/da = 1
    if (!need_dx[1]) return;
    const Tensor* g = &dy;  // d(a +- b)/db = +-1
    if (sign_ < 0) {
        ensure(neg_, dy.shape(), dev);
        ops::axpby_inplace(dev, -1.0f, dy, 0.0f, neg_);
        g = &neg_;
    }
    if (repeat_ == 1) {
        dxs[1] = g;
        return;
    }
    const int64_t n = dy.dim(0), cols = numel(b_sample_);
    ensure(db_, batched(n, b_sample_), dev);
    Tensor db_rows = db_.reshaped({n, cols});
    ops::reduce(dev, g->reshaped({n, repeat_, cols}), db_rows, XYLEM_REDUCE_SUM, 1);  // b's gradient: its copies' sum
    dxs[1] = &db_;
}

std::vector<uint32_t> Add::ops_needed(bool backward) const {
    std::vector<uint32_t> ops{XYLEM_OP_ADD};
    if (repeat_ != 1) ops.push_back(XYLEM_OP_GATHER_ROWS);
    if (backward && repeat_ != 1) ops.push_back(XYLEM_OP_REDUCE);
    if (backward && sign_ < 0) ops.push_back(XYLEM_OP_AXPBY);
    return ops;
}

// ---- mul ----

namespace {

// How b (per sample) spreads over a: in rows of `row` values, each over `copies` consecutive
// places of a. False when b is none of a's shape, its trailing part, or its leading part then ones.
bool mul_spread(const Shape& a, const Shape& b, int64_t& row, int64_t& copies) {
    const int64_t nb = numel(b), na = numel(a);
    if (b.size() <= a.size() && std::equal(b.begin(), b.end(), a.end() - static_cast<std::ptrdiff_t>(b.size()))) {
        row = std::max<int64_t>(nb, 1);  // the same shape (copies 1), or the trailing part (as add)
        copies = nb ? na / nb : 1;
        return true;
    }
    if (b.size() != a.size()) return false;
    size_t k = 0;  // a's leading part, then ones: each value over a's remaining axes
    while (k < b.size() && b[k] == a[k]) ++k;
    for (size_t i = k; i < b.size(); ++i)
        if (b[i] != 1) return false;
    row = 1;
    copies = nb ? na / nb : 1;
    return true;
}

}  // namespace

Shape Mul::output_shape_of(const std::vector<Shape>& in) const {
    check_input_count(in.size());
    int64_t row = 1, copies = 1;
    if (!mul_spread(in[0], in[1], row, copies))
        throw Error(label() + ": cannot multiply " + named(*this, 0) + " " + to_string(in[0]) + " by " + named(*this, 1) +
                    " " + to_string(in[1]) +
                    " per sample: the second must have the first's shape, its trailing part, or its leading part with "
                    "ones after it (as [C, 1, 1] for [C, H, W])");
    return in[0];
}

void Mul::spread_of(const Shape& a, const Shape& b) {
    output_shape_of({a, b});
    mul_spread(a, b, row_, copies_);
    b_sample_ = b;
}

void Mul::bind_inputs(Device&, const std::vector<Shape>& in, std::mt19937_64&) { spread_of(in[0], in[1]); }

const Tensor& Mul::forward_inputs(Device& dev, const std::vector<const Tensor*>& xs, bool) {
    check_input_count(xs.size());
    const Tensor& a = *xs[0];
    const Tensor& b = *xs[1];
    check_batches(*this, a, b);
    spread_of(Shape(a.shape().begin() + 1, a.shape().end()), Shape(b.shape().begin() + 1, b.shape().end()));
    a_ = a;
    ensure_output(y_, a.shape(), dev);
    if (copies_ == 1) {
        b_ = b.reshaped(a.shape());
        ops::mul(dev, a, b_, y_);
        return y_;
    }
    // b's rows, each repeated copies_ times in a row: sample n's b at each place of sample n's a.
    const int64_t n = a.dim(0), per_sample = numel(b_sample_) / row_, rows = n * per_sample;
    if (rows * copies_ > std::numeric_limits<int32_t>::max())
        throw Error(label() + ": " + to_string(a.shape()) + " has more elements than gather_rows' int32 indices reach");
    const Tensor& idx = spread_.spread(dev, n, per_sample, copies_);
    ensure(b_wide_, {rows * copies_, row_}, dev);
    ops::gather_rows(dev, b.reshaped({rows, row_}), idx, b_wide_);
    b_ = b_wide_.reshaped(a.shape());
    ops::mul(dev, a, b_, y_);
    return y_;
}

void Mul::backward_inputs(Device& dev, const Tensor& dy, const std::vector<bool>& need_dx,
                          std::vector<const Tensor*>& dxs) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    dxs.assign(2, nullptr);
    if (need_dx[0]) {  // d(a*b)/da = b (spread)
        ensure(da_, dy.shape(), dev);
        ops::mul(dev, dy, b_, da_);
        dxs[0] = &da_;
    }
    if (!need_dx[1]) return;
    ensure(prod_, dy.shape(), dev);  // d(a*b)/db = a, summed over b's copies
    ops::mul(dev, dy, a_, prod_);
    if (copies_ == 1) {
        dxs[1] = &prod_;
        return;
    }
    const int64_t n = dy.dim(0), rows = n * numel(b_sample_) / row_;
    ensure(db_, batched(n, b_sample_), dev);
    Tensor db_rows = db_.reshaped({rows, row_});
    // The copies of a b row lie copies_ apart in memory as whole rows (trailing) or side by side
    // (leading part then ones: row_ = 1): [rows, copies, row] summed over its middle axis either way.
    ops::reduce(dev, prod_.reshaped({rows, copies_, row_}), db_rows, XYLEM_REDUCE_SUM, 1);
    dxs[1] = &db_;
}

std::vector<uint32_t> Mul::ops_needed(bool backward) const {
    std::vector<uint32_t> ops{XYLEM_OP_MUL};
    if (copies_ != 1) ops.push_back(XYLEM_OP_GATHER_ROWS);
    if (backward && copies_ != 1) ops.push_back(XYLEM_OP_REDUCE);
    return ops;
}

// ---- concat ----

Concat::Concat(int64_t axis) : axis_(axis) {
    if (axis == 0) throw Error("concat layer: axis 0 is the batch; join along axis 1 or later (or -1, the last)");
}

size_t Concat::sample_axis(size_t rank) const {
    const int64_t batched_rank = static_cast<int64_t>(rank) + 1;
    const int64_t a = axis_ < 0 ? axis_ + batched_rank : axis_;
    if (a < 1 || a >= batched_rank)
        throw Error(label() + ": axis " + std::to_string(axis_) + " is out of range for inputs of " + std::to_string(rank) +
                    " axes per sample (batched: " + std::to_string(batched_rank) + "; axis 0, the batch, cannot be joined)");
    return static_cast<size_t>(a - 1);
}

Shape Concat::output_shape_of(const std::vector<Shape>& in) const {
    check_input_count(in.size());
    const size_t ax = sample_axis(in[0].size());
    Shape out = in[0];
    for (size_t k = 1; k < in.size(); ++k) {
        bool fits = in[k].size() == in[0].size();
        for (size_t d = 0; fits && d < in[0].size(); ++d) fits = d == ax || in[k][d] == in[0][d];
        if (!fits)
            throw Error(label() + ": cannot join " + named(*this, 0) + " " + to_string(in[0]) + " and " + named(*this, k) +
                        " " + to_string(in[k]) + " along axis " + std::to_string(axis_) +
                        ": every other axis must agree");
        out[ax] += in[k][ax];
    }
    return out;
}

void Concat::bind_inputs(Device&, const std::vector<Shape>& in, std::mt19937_64&) {
    output_shape_of(in);
    const size_t ax = sample_axis(in[0].size());
    inner_ = 1, outer_ = 1;
    for (size_t d = ax + 1; d < in[0].size(); ++d) inner_ *= in[0][d];
    for (size_t d = 0; d < ax; ++d) outer_ *= in[0][d];  // the same for every input: the other axes agree
    extents_.clear();
    total_ = 0;
    for (const Shape& s : in) {
        extents_.push_back(s[ax]);
        total_ += s[ax];
    }
    samples_ = in;
    dx_.assign(in.size(), Tensor());
    pick_.assign(in.size(), RowIndexCache());
}

// Forward: each input's rows are copied one after the other into `stacked_`, then one gather puts
// every block's rows in order (block b of the output: block b of input 0, of input 1, ...).
// Backward: one gather per input picks its rows out of dy.
const Tensor& Concat::forward_inputs(Device& dev, const std::vector<const Tensor*>& xs, bool) {
    check_input_count(xs.size());
    if (xs.size() != extents_.size()) throw Error(label() + ": used before the model was built");
    const int64_t n = xs[0]->dim(0);
    std::vector<Shape> samples;
    for (const Tensor* x : xs) {
        if (x->shape().empty() || x->dim(0) != n)
            throw Error(label() + ": the inputs' batches differ: " + to_string(xs[0]->shape()) + " and " + to_string(x->shape()));
        samples.emplace_back(x->shape().begin() + 1, x->shape().end());
    }
    const Shape out = output_shape_of(samples);
    const int64_t blocks = n * outer_;
    ensure(stacked_, {blocks * total_, inner_}, dev);
    int64_t at = 0;
    for (size_t k = 0; k < xs.size(); ++k) {
        Tensor part = stacked_.rows(at, blocks * extents_[k]);
        ops::copy(dev, xs[k]->reshaped({blocks * extents_[k], inner_}), part);
        at += blocks * extents_[k];
    }
    // Built once per batch size (the lambda runs only then): no copy of the extents per step.
    const Tensor& idx = interleave_.get(dev, n, [this](int64_t batch) {
        const int64_t count = batch * outer_;
        std::vector<int32_t> rows;
        rows.reserve(static_cast<size_t>(count * total_));
        for (int64_t b = 0; b < count; ++b) {
            int64_t base = 0;
            for (int64_t e : extents_) {
                for (int64_t r = 0; r < e; ++r) rows.push_back(static_cast<int32_t>(base + b * e + r));
                base += count * e;
            }
        }
        return rows;
    });
    ensure_output(y_, batched(n, out), dev);
    Tensor y_rows = y_.reshaped({blocks * total_, inner_});
    ops::gather_rows(dev, stacked_, idx, y_rows);
    return y_;
}

void Concat::backward_inputs(Device& dev, const Tensor& dy, const std::vector<bool>& need_dx,
                             std::vector<const Tensor*>& dxs) {
    if (dy.shape() != y_.shape()) shape_error("output gradient", dy.shape(), y_.shape());
    const int64_t n = dy.dim(0), blocks = n * outer_;
    const Tensor dy_rows = dy.reshaped({blocks * total_, inner_});
    dxs.assign(extents_.size(), nullptr);
    int64_t offset = 0;
    for (size_t k = 0; k < extents_.size(); ++k) {
        const int64_t e = extents_[k], start = offset, total = total_, outer = outer_;
        offset += e;
        if (!need_dx[k]) continue;
        const Tensor& idx = pick_[k].get(dev, n, [e, start, total, outer](int64_t batch) {
            std::vector<int32_t> rows;
            rows.reserve(static_cast<size_t>(batch * outer * e));
            for (int64_t b = 0; b < batch * outer; ++b)
                for (int64_t r = 0; r < e; ++r) rows.push_back(static_cast<int32_t>(b * total + start + r));
            return rows;
        });
        ensure(dx_[k], batched(n, samples_[k]), dev);
        Tensor rows = dx_[k].reshaped({blocks * e, inner_});
        ops::gather_rows(dev, dy_rows, idx, rows);
        dxs[k] = &dx_[k];
    }
}

std::vector<uint32_t> Concat::ops_needed(bool) const { return {XYLEM_OP_COPY, XYLEM_OP_GATHER_ROWS}; }

namespace {

const LayerRegistration<NoLayerOptions> kAdd{
    "add", {}, nullptr, [](const NoLayerOptions&, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<Add>(); }};

const LayerRegistration<NoLayerOptions> kSub{
    "sub", {}, nullptr,
    [](const NoLayerOptions&, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<Add>(true); }};

const LayerRegistration<NoLayerOptions> kMul{
    "mul", {}, nullptr, [](const NoLayerOptions&, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<Mul>(); }};

const LayerRegistration<ConcatOptions> kConcat{
    "concat", {"axis"},
    [](const ConfigSection& s) {
        ConcatOptions o;
        s.get("axis", o.axis, IntRange{-64, 64});
        if (o.axis == 0) s.fail("axis", "is 0, the batch axis; join along axis 1 (channels or features) or later, or -1 (the last)");
        return o;
    },
    [](const ConcatOptions& o, LayerContext&) -> std::unique_ptr<Layer> { return std::make_unique<Concat>(o.axis); }};

}  // namespace

}  // namespace xylem
