// The stacked recurrent layer shared by lstm and gru: input projections, permutations, dropout
// between levels, carried state, and the parameter gradients (the layouts: recurrent.h).
#include "xylem/layers/recurrent.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "xylem/error.h"
#include "xylem/layers/registry.h"
#include "xylem/op_calls.h"

namespace xylem {

namespace {
// A batch shape not seen before gets its own buffers; past this many shapes (training, its tail
// batch, evaluation, sampling, ...) the old ones are dropped.
constexpr size_t kMaxWorkspaces = 6;
}  // namespace

Recurrent::Recurrent(const RecurrentOptions& o, uint64_t seed, int gates, int carried)
    : opt_(o), seed_(seed), gates_(gates), carried_(carried), h_(o.hidden) {
    if (o.hidden <= 0) throw Error("recurrent layer: hidden must be positive, got " + std::to_string(o.hidden));
    if (o.layers <= 0) throw Error("recurrent layer: layers must be positive, got " + std::to_string(o.layers));
    if (!(o.dropout >= 0.0f && o.dropout < 1.0f))
        throw Error("recurrent layer: dropout must be in [0, 1), got " + std::to_string(o.dropout));
    if (!(o.init >= 0.0f) || !std::isfinite(o.init))
        throw Error("recurrent layer: init must be a finite bound >= 0, got " + std::to_string(o.init));
}

Shape Recurrent::output_shape(const Shape& input) const {
    if (input.size() != 2 || input[0] <= 0 || input[1] <= 0)
        shape_error("expects [time, features] per sample (an embedding or a one-hot sequence)", input,
                    {input.empty() || input[0] <= 0 ? 1 : input[0], in_ ? in_ : input.size() > 1 ? input.back() : 1});
    if (in_ && input[1] != in_) shape_error("input features do not match weight_ih_l0", input, {input[0], in_});
    return {input[0], h_};
}

Layer::ParamFloats Recurrent::param_floats_of(const std::vector<Shape>& in) const {
    const int64_t g = gates_ * h_;  // per level: weight_ih, weight_hh, bias_ih, bias_hh (bind)
    int64_t n = 0;
    for (int64_t l = 0; l < opt_.layers; ++l) n += g * (l == 0 ? in[0][1] : h_) + g * h_ + 2 * g;
    return {n, 0};
}

void Recurrent::bind(Device& dev, const Shape& input, std::mt19937_64& rng) {
    output_shape(input);
    in_ = input[1];
    dev_ = &dev;
    // PyTorch's nn.LSTM / nn.GRU reset_parameters: every tensor from U(-1/sqrt(hidden), +), drawn
    // in state_dict order; char-rnn's configs use U(-init, init).
    const float bound = opt_.init > 0.0f ? opt_.init : 1.0f / std::sqrt(static_cast<float>(h_));
    const int64_t g = gates_ * h_;
    params_.clear();
    params_.reserve(static_cast<size_t>(4 * opt_.layers));  // params() hands out pointers: no reallocation
    for (int64_t l = 0; l < opt_.layers; ++l) {
        const std::string n = "_l" + std::to_string(l);
        params_.push_back(uniform_param(dev, "weight_ih" + n, {g, l == 0 ? in_ : h_}, bound, rng));
        params_.push_back(uniform_param(dev, "weight_hh" + n, {g, h_}, bound, rng));
        params_.push_back(uniform_param(dev, "bias_ih" + n, {g}, bound, rng));
        params_.push_back(uniform_param(dev, "bias_hh" + n, {g}, bound, rng));
        init_bias(weights(l));
    }
    spaces_.clear();
    last_ = nullptr;
}

std::vector<Param*> Recurrent::params() {
    std::vector<Param*> out;
    for (Param& p : params_) out.push_back(&p);
    return out;
}

Recurrent::Weights Recurrent::weights(int64_t l) {
    Param* p = &params_.at(static_cast<size_t>(4 * l));
    return {p, p + 1, p + 2, p + 3};
}

Tensor& Recurrent::state(int64_t level, int cell) {
    if (!last_) throw Error(label() + ": no forward has run, so there is no state");
    return last_->levels.at(static_cast<size_t>(level)).carry.at(static_cast<size_t>(cell));
}

// idx[j*a + i] = i*b + j: rows (i, j) of an [a, b] grid of rows to (j, i). Built once per (a, b)
// and uploaded explicitly (no step transfers it again).
const Tensor& Recurrent::index(Device& dev, int64_t a, int64_t b) {
    const auto key = std::make_pair(a, b);
    auto it = indices_.find(key);
    if (it != indices_.end()) return it->second;
    if (a * b > std::numeric_limits<int32_t>::max())
        throw Error(label() + ": " + std::to_string(a) + " x " + std::to_string(b) +
                    " rows exceed the int32 indices of gather_rows (use a smaller batch or sequence)");
    Tensor t({a * b}, DType::I32, dev);
    int32_t* p = t.host_write<int32_t>();
    for (int64_t i = 0; i < a; ++i)
        for (int64_t j = 0; j < b; ++j) p[j * a + i] = static_cast<int32_t>(i * b + j);
    t.upload(dev);
    return indices_.emplace(key, std::move(t)).first->second;
}

void Recurrent::swap_rows(Device& dev, const Tensor& src, int64_t a, int64_t b, Tensor& out) {
    const int64_t row = src.numel() / (a * b);
    Tensor o = out.reshaped({a * b, row});
    ops::gather_rows(dev, src.reshaped({a * b, row}), index(dev, a, b), o);
}

Recurrent::Workspace& Recurrent::workspace(Device& dev, int64_t batch, int64_t time) {
    const auto key = std::make_pair(batch, time);
    auto it = spaces_.find(key);
    if (it != spaces_.end()) return it->second;
    if (spaces_.size() >= kMaxWorkspaces) {
        dev.sync();  // state resets may still be reading their zeros
        spaces_.clear();
        last_ = nullptr;
    }
    Workspace& ws = spaces_[key];
    const int64_t h = h_, g = gates_ * h_, tb = time * batch;
    ws.levels.resize(static_cast<size_t>(opt_.layers));
    for (int64_t l = 0; l < opt_.layers; ++l) {
        Level& lv = ws.levels[static_cast<size_t>(l)];
        const int64_t in = l == 0 ? in_ : h;
        const Shape x_shape = l == 0 ? Shape{tb, in} : Shape{in, tb};
        lv.x = Tensor(x_shape, DType::F32, dev);
        lv.dx = Tensor(x_shape, DType::F32, dev);
        lv.p = Tensor({g, tb}, DType::F32, dev);
        lv.z = Tensor({time * g, batch}, DType::F32, dev);
        lv.a = Tensor({time * g, batch}, DType::F32, dev);
        lv.hs = Tensor({(time + 1) * h, batch}, DType::F32, dev);
        lv.bias = Tensor({g, 1}, DType::F32, dev);
        lv.hprev_t = Tensor({h, tb}, DType::F32, dev);
        lv.dy = Tensor({time * h, batch}, DType::F32, dev);
        lv.carry.clear();
        for (int i = 0; i < carried_; ++i) lv.carry.emplace_back(Shape{h, batch}, DType::F32, dev);
        allocate(dev, lv, batch, time);
    }
    ws.y = Tensor({batch, time, h}, DType::F32, dev);
    if (token_ids_) {
        ws.ids = Tensor({tb}, DType::I32, dev);
        ws.w_cols = Tensor({in_ * g}, DType::F32, dev);
        ws.cols = Tensor({tb * g}, DType::F32, dev);
    }
    ws.zeros.assign(static_cast<size_t>(h * batch), 0.0f);
    zero_state(dev, ws);
    return ws;
}

void Recurrent::zero_state(Device& dev, Workspace& ws) {
    for (Level& lv : ws.levels)
        for (Tensor& c : lv.carry) c.upload_from(dev, ws.zeros.data());  // explicit: fine in strict mode
}

void Recurrent::reset_state() {
    restore_pending_ = false;
    if (!dev_) return;
    for (auto& [key, ws] : spaces_) zero_state(*dev_, ws);
}

std::string Recurrent::carried_name(int64_t level, int cell) const {
    return (cell == 0 ? "h_l" : "c_l") + std::to_string(level);
}

std::vector<std::pair<std::string, const Tensor*>> Recurrent::carried_state() {
    std::vector<std::pair<std::string, const Tensor*>> out;
    if (!last_ || !trained_) return out;
    for (int64_t l = 0; l < opt_.layers; ++l)
        for (int i = 0; i < carried_; ++i)
            out.emplace_back(carried_name(l, i), &last_->levels[static_cast<size_t>(l)].carry[static_cast<size_t>(i)]);
    return out;
}

void Recurrent::restore_carried_state(const std::map<std::string, SavedTensor>& saved) {
    if (saved.empty()) return;  // nothing was carried (a checkpoint at an epoch's end, or an older one)
    std::vector<std::string> names;  // in carried order (level, cell)
    for (int64_t l = 0; l < opt_.layers; ++l)
        for (int i = 0; i < carried_; ++i) names.push_back(carried_name(l, i));
    for (const auto& [name, t] : saved)
        if (std::find(names.begin(), names.end(), name) == names.end())
            throw Error(label() + ": the checkpoint's carried state has '" + name + "', which this layer does not carry (" +
                        std::to_string(opt_.layers) + " level(s) of h_l<k>" + (carried_ > 1 ? " and c_l<k>" : "") + ")");
    std::vector<std::vector<float>> values;
    int64_t batch = 0;
    for (const std::string& name : names) {
        auto it = saved.find(name);
        if (it == saved.end()) throw Error(label() + ": the checkpoint's carried state has no '" + name + "'");
        const SavedTensor& t = it->second;
        const bool first = values.empty();  // its batch is every other tensor's
        if (first && t.shape.size() == 2) batch = t.shape[1];
        if (t.shape != Shape{h_, batch} || batch <= 0 || t.values.size() != static_cast<size_t>(h_ * batch))
            throw Error(label() + ": carried state '" + name + "' is " + to_string(t.shape) + ", expected " +
                        (first ? "[" + std::to_string(h_) + ", batch]"
                               : to_string(Shape{h_, batch}) + " (the batch of '" + names.front() + "')"));
        if (!std::all_of(t.values.begin(), t.values.end(), [](float v) { return std::isfinite(v); }))
            throw Error(label() + ": carried state '" + name + "' holds non-finite values (NaN or inf)");
        values.push_back(t.values);
    }
    restored_ = std::move(values);
    restored_batch_ = batch;
    restore_pending_ = true;
}

bool Recurrent::take_token_ids(int64_t vocab, Backend& backend) {
    for (uint32_t op : {XYLEM_OP_PERMUTE, XYLEM_OP_SCATTER_ADD_ROWS})
        if (!backend.supports(op)) return false;
    if (vocab != in_) return false;
    token_ids_ = true;
    spaces_.clear();  // buffers for the ids come with the next workspace
    last_ = nullptr;
    return true;
}

// One-hot rows times W_ih^T are W_ih's columns: Z (t, gate unit, b) = W_ih[:, id] + bias, the
// same values as the GEMM, which adds vocab - 1 zero products to each (char-rnn: 113 of 114).
void Recurrent::forward_tokens(Device& dev, const Tensor& x, const Weights& w, Workspace& ws, int64_t batch,
                               int64_t time) {
    Level& lv = ws.levels[0];
    const int64_t g = gates_ * h_, tb = batch * time;
    swap_rows(dev, x, batch, time, ws.ids);  // (b, t) -> (t, b)
    Tensor w_cols = ws.w_cols.reshaped({in_, g}), cols = ws.cols.reshaped({tb, g});
    ops::permute(dev, w.w_ih->value, w_cols, {1, 0});
    combine_bias(dev, w, lv);
    ops::add(dev, 1.0f, w_cols, 1.0f, lv.bias.reshaped({g}), w_cols);
    ops::gather_rows(dev, w_cols, ws.ids, cols);  // rows (t, b)
    Tensor z = lv.z.reshaped({time, g, batch});
    ops::permute(dev, cols.reshaped({time, batch, g}), z, {0, 2, 1});
}

// dW_ih[u, v] = the sum of ig's gradient over the steps whose id is v: ig.grad [count, T*B]
// transposed to rows (t, b), scattered into W_ih^T's rows in that order, transposed back.
void Recurrent::backward_tokens(Device& dev, Workspace& ws, const InputGrad& ig, Tensor& gw) {
    const int64_t tb = ws.ids.numel(), count = ig.count;
    Tensor rows = ws.cols.rows(0, tb * count).reshaped({tb, count});
    Tensor acc = ws.w_cols.rows(0, in_ * count).reshaped({in_, count});
    ops::permute(dev, ig.grad, rows, {1, 0});
    ops::fill(dev, acc, 0.0f);
    ops::scatter_add_rows(dev, rows, ws.ids, acc);
    ops::permute(dev, acc, gw, {1, 0});
}

const Tensor& Recurrent::forward(Device& dev, const Tensor& x, bool train) {
    const bool tokens = token_ids_ && x.dtype() == DType::I32;  // a one_hot's ids (take_token_ids)
    if (tokens) {
        if (x.shape().size() != 2 || x.dim(0) <= 0 || x.dim(1) <= 0)
            shape_error("token ids", x.shape(), {x.shape().empty() ? -1 : x.dim(0), x.shape().size() > 1 ? x.dim(1) : -1});
    } else {
        if (x.shape().size() != 3 || x.dim(0) <= 0 || x.dim(1) <= 0 || x.dim(2) != in_)
            shape_error("input", x.shape(), {x.shape().empty() ? -1 : x.dim(0), x.shape().size() > 1 ? x.dim(1) : -1, in_});
        if (x.dtype() != DType::F32)
            throw Error(label() + ": expects float features [batch, time, features] (token ids need an embedding layer first)");
    }
    const int64_t batch = x.dim(0), time = x.dim(1), h = h_, g = gates_ * h_;
    dev_ = &dev;
    Workspace& ws = workspace(dev, batch, time);
    // The state carries over only between batches of one shape (a tail batch starts from zero,
    // and so does the next full batch after it).
    if (&ws != last_ && last_) zero_state(dev, ws);
    last_ = &ws;
    ws.tokens = tokens;
    if (restore_pending_) {  // a resumed run's first batch continues from the checkpoint's state
        restore_pending_ = false;
        if (batch != restored_batch_)  // a resume keeps train.batch_size: the file is not this run's
            throw Error(label() + ": the checkpoint's carried state is for batches of " + std::to_string(restored_batch_) +
                        ", the resumed run's first batch has " + std::to_string(batch));
        for (int64_t l = 0, k = 0; l < opt_.layers; ++l)
            for (int i = 0; i < carried_; ++i, ++k)
                ws.levels[static_cast<size_t>(l)].carry[static_cast<size_t>(i)].upload_from(dev, restored_[static_cast<size_t>(k)].data());
    }
    trained_ = train;
    dropped_ = train && opt_.dropout > 0.0f && opt_.layers > 1;

    for (int64_t l = 0; l < opt_.layers; ++l) {
        Level& lv = ws.levels[static_cast<size_t>(l)];
        const Weights w = weights(l);
        if (l == 0 && tokens) {
            forward_tokens(dev, x, w, ws, batch, time);
        } else if (l == 0) {
            swap_rows(dev, x, batch, time, lv.x);  // rows (b, t) -> (t, b)
            ops::gemm(dev, false, true, 1.0f, w.w_ih->value, lv.x, 0.0f, lv.p);
        } else {
            const Level& below = ws.levels[static_cast<size_t>(l - 1)];
            Tensor in = below.hs.rows(h, time * h);  // h_1..h_T: rows (t, unit)
            if (dropped_) {
                ensure(lv.drop, in.shape(), dev);
                ensure(lv.mask, in.shape(), dev);
                ops::dropout_fwd(dev, in, lv.drop, lv.mask, opt_.dropout, seed_ + 0x632BE59BD9B4E019ull * ++calls_);
                in = lv.drop;
            }
            swap_rows(dev, in, time, h, lv.x);  // rows (t, unit) -> (unit, t)
            ops::gemm(dev, false, false, 1.0f, w.w_ih->value, lv.x, 0.0f, lv.p);
        }
        if (!(l == 0 && tokens)) {
            combine_bias(dev, w, lv);
            ops::add(dev, 1.0f, lv.p, 1.0f, lv.bias, lv.p);
            swap_rows(dev, lv.p, g, time, lv.z);  // rows (gate unit, t) -> (t, gate unit)
        }
        Tensor h0 = block(lv.hs, 0);
        ops::copy(dev, lv.carry[0], h0);
        if (carried_ > 1) {
            Tensor c0 = block(lv.c, 0);
            ops::copy(dev, lv.carry[1], c0);
        }
        for (int64_t t = 0; t < time; ++t) forward_step(dev, w, lv, t);
        ops::copy(dev, block(lv.hs, time), lv.carry[0]);
        if (carried_ > 1) ops::copy(dev, block(lv.c, time), lv.carry[1]);
    }
    // The top level's h, elementwise (t, unit, b) -> (b, t, unit).
    swap_rows(dev, ws.levels.back().hs.rows(h, time * h), time * h, batch, ws.y);
    return ws.y;
}

const Tensor& Recurrent::backward(Device& dev, const Tensor& dy, bool need_dx) {
    if (!last_) throw Error(label() + ": backward before any forward");
    Workspace& ws = *last_;
    if (dy.shape() != ws.y.shape()) shape_error("output gradient", dy.shape(), ws.y.shape());
    const int64_t batch = dy.dim(0), time = dy.dim(1), h = h_, g = gates_ * h_, tb = batch * time;
    swap_rows(dev, dy, batch, time * h, ws.levels.back().dy);  // (b, t, unit) -> (t, unit, b)
    for (int64_t l = opt_.layers - 1; l >= 0; --l) {
        Level& lv = ws.levels[static_cast<size_t>(l)];
        const Weights w = weights(l);
        begin_backward(dev, lv);
        for (int64_t t = time - 1; t >= 0; --t) backward_step(dev, w, lv, t);
        const std::vector<InputGrad> grads = gate_grads(dev, lv);

        // W_hh and b_hh: one GEMM over every step, with h_{t-1} gathered to (unit, t, b).
        swap_rows(dev, lv.hs.rows(0, time * h), time, h, lv.hprev_t);
        ops::gemm(dev, false, true, 1.0f, lv.p, lv.hprev_t, 0.0f, w.w_hh->grad);
        ops::bias_grad(dev, lv.p.reshaped({1, g, tb}), w.b_hh->grad);

        // W_ih and b_ih, block by block (gru's n rows see r*(W_hn h + b_hn), not the hidden side).
        for (const InputGrad& ig : grads) {
            Tensor gw = w.w_ih->grad.rows(ig.first, ig.count), gb = w.b_ih->grad.rows(ig.first, ig.count);
            if (l == 0 && ws.tokens) backward_tokens(dev, ws, ig, gw);
            else ops::gemm(dev, false, l > 0, 1.0f, ig.grad, lv.x, 0.0f, gw);
            if (ig.same_as_hidden) ops::copy(dev, w.b_hh->grad.rows(ig.first, ig.count), gb);  // summed once
            else ops::bias_grad(dev, ig.grad.reshaped({1, ig.count, tb}), gb);
        }
        if (l == 0 && !need_dx) break;
        if (l == 0 && ws.tokens) throw Error(label() + ": its input is token ids, which have no gradient");
        for (size_t i = 0; i < grads.size(); ++i) {
            const Tensor wr = w.w_ih->value.rows(grads[i].first, grads[i].count);
            const float beta = i ? 1.0f : 0.0f;
            if (l == 0) ops::gemm(dev, true, false, 1.0f, grads[i].grad, wr, beta, lv.dx);  // [T*B, F]
            else ops::gemm(dev, true, false, 1.0f, wr, grads[i].grad, beta, lv.dx);         // [Hin, T*B]
        }
        if (l == 0) {
            ensure(ws.dx, {batch, time, in_}, dev);
            swap_rows(dev, lv.dx, time, batch, ws.dx);  // rows (t, b) -> (b, t)
        } else {
            Level& below = ws.levels[static_cast<size_t>(l - 1)];
            if (dropped_) {
                ensure(lv.dx_rows, lv.mask.shape(), dev);
                swap_rows(dev, lv.dx, h, time, lv.dx_rows);  // rows (unit, t) -> (t, unit)
                ops::mul(dev, lv.dx_rows, lv.mask, below.dy);
            } else {
                swap_rows(dev, lv.dx, h, time, below.dy);
            }
        }
    }
    return ws.dx;
}

std::vector<uint32_t> Recurrent::ops_needed(bool backward) const {
    std::vector<uint32_t> ops = {XYLEM_OP_GATHER_ROWS, XYLEM_OP_GEMM, XYLEM_OP_ADD,    XYLEM_OP_COPY,
                                 XYLEM_OP_AXPBY,       XYLEM_OP_MUL,  XYLEM_OP_ACT_FWD, XYLEM_OP_FILL};
    if (token_ids_) ops.push_back(XYLEM_OP_PERMUTE);
    if (!backward) return ops;
    ops.insert(ops.end(), {XYLEM_OP_ACT_BWD, XYLEM_OP_BIAS_GRAD});
    if (opt_.dropout > 0.0f && opt_.layers > 1) ops.push_back(XYLEM_OP_DROPOUT_FWD);
    if (token_ids_) ops.push_back(XYLEM_OP_SCATTER_ADD_ROWS);
    return ops;
}

RecurrentOptions parse_recurrent_options(const ConfigSection& s, bool lstm) {
    RecurrentOptions o;
    if (!s.has("hidden")) s.fail("hidden", std::string("is required for a ") + (lstm ? "lstm" : "gru") + " layer");
    s.get("hidden", o.hidden, ranges::features);
    s.get("layers", o.layers, IntRange{1, 1024});
    s.get("dropout", o.dropout);
    if (!(o.dropout >= 0.0f && o.dropout < 1.0f)) s.fail("dropout", "must be in [0, 1)");
    if (lstm) s.get("forget_bias", o.forget_bias);
    s.get("init", o.init);
    if (s.has("init") && !(o.init > 0.0f))
        s.fail("init", "must be positive (the bound of U(-init, init)); leave it out for PyTorch's 1/sqrt(hidden)");
    return o;
}

}  // namespace xylem
