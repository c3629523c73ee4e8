// Recurrent: the machinery LSTM and GRU share (layers/recurrent.cpp): a stack of `layers`
// recurrent levels over [batch, time, features] inputs, dropout between levels, hidden state
// carried from one batch to the next (truncated back-propagation through time), parameters
// named and laid out as PyTorch's nn.LSTM / nn.GRU state_dict. The gate arithmetic of one time
// step is the cell's (Lstm, Gru: layers/lstm.cpp, layers/gru.cpp).
//
// Layout. Core ops see dense row-major tensors and row ranges only, so every per-step operand is
// a contiguous block: inside the layer, sequences are time-major and feature-major, a step's
// hidden state is an [H, B] block (unit-major, batch inner) and a step's gate pre-activations are
// [G*H, B] (gate-major: gate k is rows k*H..k*H+H, its own contiguous [H, B] block). That is
// what a GEMM with PyTorch's weight [G*H, H] on the left gives: W_hh * h_prev [H, B] = [G*H, B],
// one GEMM per step for every gate. Per batch and level:
//   X      the level's input, as a GEMM operand: level 0 time-major rows [T*B, F] (t, b);
//          level l > 0 [Hin, T*B] (unit, t, b).
//   P      W_ih * X^T + bias, all time steps in one GEMM: [G*H, T*B] (gate unit, t, b).
//   Z      P with its (gate unit, t) rows swapped to (t, gate unit): [T*G*H, B], step t's gates
//          are rows t*G*H.. (one gather_rows).
//   Hs     h of every step, [(T+1)*H, B]: block 0 the carried initial state, block t+1 = h_t.
// The permutations between the layer's [B, T, F] interface and these layouts are gather_rows ops
// with a cached index (one per permutation and batch): the input (rows of F), each upper level's
// input (rows of B), the gates (rows of B), and the output, an element-wise transpose
// (t, h, b) -> (b, t, h). The backward pass gathers the same ways back.
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "xylem/config_section.h"
#include "xylem/layers/layer.h"

namespace xylem {

// [[model.layers]] type = "lstm" or "gru": hidden (required), layers, dropout, init, and for
// lstm forget_bias.
struct RecurrentOptions {
    int64_t hidden = 0;
    int64_t layers = 1;
    float dropout = 0.0f;      // between stacked levels, in training (PyTorch's `dropout`)
    float forget_bias = 0.0f;  // lstm: added to bias_ih's forget gate after init (char-rnn: 1)
    float init = 0.0f;         // > 0: every parameter from U(-init, init); 0: PyTorch's U(+-1/sqrt(hidden))
};

class Recurrent : public Layer {
public:
    Shape output_shape(const Shape& input) const override;
    void bind(Device& dev, const Shape& input, std::mt19937_64& rng) override;
    // x [B, T, F] -> y [B, T, H], the top level's h of every step. Training and evaluation both
    // carry the state: the next forward with the same batch and sequence length starts where
    // this one ended.
    const Tensor& forward(Device& dev, const Tensor& x, bool train) override;
    const Tensor& backward(Device& dev, const Tensor& dy, bool need_dx) override;
    std::vector<Param*> params() override;
    ParamFloats param_floats_of(const std::vector<Shape>& in) const override;
    std::vector<std::pair<std::string, uint64_t*>> counters() override { return {{"mask_calls", &calls_}}; }
    void reset_state() override;
    // h_l<k> (and an LSTM's c_l<k>) of every level, [hidden, batch] (unit-major), after the last
    // training forward. Restored state is installed by the next forward, which must have that
    // batch size (an Error otherwise: a resumed run keeps its batch size).
    std::vector<std::pair<std::string, const Tensor*>> carried_state() override;
    void restore_carried_state(const std::map<std::string, SavedTensor>& saved) override;
    std::vector<uint32_t> ops_needed(bool backward) const override;
    // Level 0 then takes int32 token ids [B, T] too (a one_hot's, by the Net): its input
    // projection gathers W_ih's columns and its gradient scatters into them (see forward_tokens).
    bool take_token_ids(int64_t vocab, Backend& backend) override;

    int64_t hidden() const { return opt_.hidden; }
    int64_t levels() const { return opt_.layers; }
    // The state the next forward of the last forward's shape starts from: h (cell 0) or an LSTM's
    // c (cell 1) of `level`, [H, B] (unit-major). For tests, which read it or set it; an Error
    // before the first forward.
    Tensor& state(int64_t level, int cell = 0);

protected:
    Recurrent(const RecurrentOptions& options, uint64_t seed, int gates, int carried);

    // Per-level buffers of one (batch, time) shape. Names as in the header comment; a cell uses
    // the ones it needs.
    struct Level {
        Tensor x, p, z, a, hs;              // input operand, projection, gates pre/post activation, h
        Tensor c, tc;                       // lstm: c [(T+1)*H, B], tanh(c) [T*H, B]
        Tensor r, hn, dzn, dzn_t;           // gru: W_hh*h scratch, W_hn*h + b_hn, dL/dn-pre and gathered
        Tensor bias;                        // the bias added to the projection [G*H, 1]
        Tensor drop, mask;                  // level > 0 in training with dropout: the dropped input
        Tensor hprev_t;                     // h_{t-1} of every step, [H, T*B] (for dW_hh)
        Tensor dy;                          // dL/dh_t, [T*H, B], the recurrent terms added in place
        Tensor dx, dx_rows;                 // dL/dX in X's layout, then in the level below's
        Tensor dc[2];                       // lstm: dL/dc ping-pong between steps
        std::vector<Tensor> s;              // [H, B] step temporaries
        std::vector<Tensor> carry;          // the carried state: h (and c), [H, B] each
    };
    // The cell's parameters of one level, in PyTorch's order.
    struct Weights {
        Param *w_ih, *w_hh, *b_ih, *b_hh;
    };
    // Row block [k*H, (k+1)*H) of step t in a gate-major time-major buffer (z, a): [H, B].
    Tensor gate(const Tensor& buf, int64_t t, int k) const { return buf.rows((t * gates_ + k) * h_, h_); }
    // Block j of a [n*H, B] sequence buffer (hs, c, tc, hn, dy): [H, B].
    Tensor block(const Tensor& buf, int64_t j) const { return buf.rows(j * h_, h_); }
    Tensor step(const Tensor& buf, int64_t t) const { return buf.rows(t * gates_ * h_, gates_ * h_); }
    int64_t hidden_units() const { return h_; }
    const RecurrentOptions& options() const { return opt_; }

    // ---- what a cell supplies ----
    // After a level's parameters are drawn (lstm adds forget_bias).
    virtual void init_bias(const Weights&) const {}
    virtual void allocate(Device& dev, Level& lv, int64_t batch, int64_t time) const = 0;
    // lv.bias = the bias the input projection gets (b_ih + b_hh where the cell allows).
    virtual void combine_bias(Device& dev, const Weights& w, Level& lv) const = 0;
    // Step t: the recurrent GEMM on lv.hs block t, then the gate arithmetic as consecutive
    // elementwise ops, writing lv.hs block t+1 (and the cell's saved values).
    virtual void forward_step(Device& dev, const Weights& w, Level& lv, int64_t t) const = 0;
    // Before the reverse loop (lstm zeroes dL/dc).
    virtual void begin_backward(Device&, Level&) const {}
    // Step t in reverse: the elementwise ops producing the gate gradients from lv.dy block t,
    // then (t > 0) the GEMM adding W_hh^T * dgates into lv.dy block t-1.
    virtual void backward_step(Device& dev, const Weights& w, Level& lv, int64_t t) const = 0;
    // After the loop: dL/d(W_hh*h + b_hh) of every step as [G*H, T*B] (gate unit, t, b) in lv.p,
    // and the row blocks of W_ih's gradient: {first row, count, dL/d(W_ih x + b_ih) rows}.
    struct InputGrad {
        int64_t first, count;
        Tensor grad;               // [count, T*B]
        bool same_as_hidden;       // grad is lv.p's rows [first, first + count): b_ih's gradient there is b_hh's
    };
    virtual std::vector<InputGrad> gate_grads(Device& dev, Level& lv) = 0;

    // gather_rows of `src` viewed as [a*b, row] rows (i, j) into `out` as rows (j, i).
    void swap_rows(Device& dev, const Tensor& src, int64_t a, int64_t b, Tensor& out);

private:
    struct Workspace {
        std::vector<Level> levels;
        Tensor y, dy_t, dx;         // the output [B, T, H], dL/dy time-major, dL/dx [B, T, F]
        // Token input (take_token_ids): the ids time-major [T*B] and the last forward read them;
        // W_ih^T + bias [F, G*H], the gathered projections [T*B, G*H] (t, b) and, backward, the
        // gate gradients in that layout and W_ih^T's gradient [F, G*H].
        Tensor ids, w_cols, cols;
        bool tokens = false;
        std::vector<float> zeros;   // the source of state resets (uploads read it asynchronously)
    };
    Workspace& workspace(Device& dev, int64_t batch, int64_t time);
    // Level 0's Z from token ids: W_ih's columns plus the bias, gathered and laid out (t, gate unit, b).
    void forward_tokens(Device& dev, const Tensor& ids, const Weights& w, Workspace& ws, int64_t batch, int64_t time);
    // W_ih's gradient block [count, F] from a gate gradient [count, T*B]: its columns scattered by token.
    void backward_tokens(Device& dev, Workspace& ws, const InputGrad& ig, Tensor& gw);
    void zero_state(Device& dev, Workspace& ws);
    Weights weights(int64_t level);
    const Tensor& index(Device& dev, int64_t a, int64_t b);

    RecurrentOptions opt_;
    uint64_t seed_, calls_ = 0;
    int gates_, carried_;
    int64_t in_ = 0, h_;
    std::vector<Param> params_;  // 4 per level: weight_ih, weight_hh, bias_ih, bias_hh
    std::map<std::pair<int64_t, int64_t>, Workspace> spaces_;  // by (batch, time)
    std::map<std::pair<int64_t, int64_t>, Tensor> indices_;    // swap_rows indices by (a, b)
    std::string carried_name(int64_t level, int cell) const;
    Workspace* last_ = nullptr;  // the workspace of the last forward
    // restore_carried_state's values, in carried order (level, cell); kept until the next restore,
    // since uploads read them asynchronously.
    std::vector<std::vector<float>> restored_;
    int64_t restored_batch_ = 0;
    bool restore_pending_ = false;
    Device* dev_ = nullptr;      // where the state lives (reset_state zeroes it there)
    bool trained_ = false, dropped_ = false;
    bool token_ids_ = false;     // take_token_ids accepted: level 0 may be handed int32 ids
};

// The [[model.layers]] reader lstm and gru share (lstm also reads forget_bias).
RecurrentOptions parse_recurrent_options(const ConfigSection& s, bool lstm);

}  // namespace xylem
