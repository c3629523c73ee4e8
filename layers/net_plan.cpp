// Net's inference memory plan (net.h, plan_begin and after): the buffers a forward of a
// model built to run lends its layers, and the estimate of them the memory check makes before a
// run (Net::run_floats_per_sample). Split from net.cpp, which runs the forward that drives it.
#include <algorithm>

#include "xylem/layers/net.h"

namespace xylem {

namespace {

// The buffer a loan of n floats takes: the smallest free one that holds n, or `count` (a new one
// of n floats) when none does. One rule for the plan (Net::plan_lend) and its estimate before a
// run (Net::run_floats_per_sample).
template <class Size, class Free>
size_t best_fit(size_t count, int64_t n, const Size& size, const Free& free) {
    size_t best = count;
    for (size_t b = 0; b < count; ++b)
        if (free(b) && size(b) >= n && (best == count || size(b) < size(best))) best = b;
    return best;
}

}  // namespace

// The forward of a model built to run, played on per-sample sizes (every buffer scales with the
// batch, so best fit chooses alike): the reads as for_each_read counts them, loans as plan_lend
// makes them, model outputs kept. Where the run finds a view by its storage (a reshape's output,
// an identity dropout's), this cannot look: a layer that takes no loan is taken to hold every
// buffer its inputs hold, for as long as its own output is read, so the estimate errs high.
// Before build (nothing fused or folded yet) every node runs: that estimate is higher still.
int64_t Net::run_floats_per_sample() const {
    const bool fold = fold_batch_norms_;
    std::vector<int64_t> sizes;
    std::vector<size_t> holders;
    std::vector<std::vector<size_t>> in(nodes_.size());  // the buffers each node's output lies in
    std::vector<bool> holding(nodes_.size(), false);      // until its last read
    std::vector<size_t> left(nodes_.size(), 0);           // its reads still to come
    for (const Node& n : nodes_)
        for_each_read(n, fold, [&](size_t j) {
            if (!is_model_input(j)) ++left[j];
        });
    auto release = [&](size_t j) {
        if (nodes_[j].is_output || !holding[j]) return;
        for (size_t b : in[j]) --holders[b];
        holding[j] = false;
    };
    int64_t own = 0;  // outputs of layers that take no loan
    for (size_t i = 0; i < nodes_.size(); ++i) {
        const Node& n = nodes_[i];
        const Turn turn = turn_of(n, fold);
        if (turn == Turn::later) continue;
        const Layer* runs = turn == Turn::residual ? nodes_[n.residual_conv].layer.get()
                            : turn == Turn::runs    ? n.layer.get()
                                                    : nullptr;
        if (turn == Turn::view) {
            if (!is_model_input(n.from[0])) in[i] = in[n.from[0]];
        } else if (runs->takes_lent_output()) {
            const int64_t want = numel(n.shape);
            const size_t b = best_fit(sizes.size(), want, [&](size_t k) { return sizes[k]; },
                                      [&](size_t k) { return holders[k] == 0; });
            if (b == sizes.size()) sizes.push_back(want), holders.push_back(0);
            in[i] = {b};
        } else {
            own += numel(n.shape);
            for (size_t j : n.from)
                if (!is_model_input(j)) in[i].insert(in[i].end(), in[j].begin(), in[j].end());
        }
        for (size_t b : in[i]) ++holders[b];
        holding[i] = true;
        if (left[i] == 0) release(i);
        for_each_read(n, fold, [&](size_t j) {
            if (!is_model_input(j) && left[j] > 0 && --left[j] == 0) release(j);
        });
    }
    int64_t planned = 0;
    for (int64_t size : sizes) planned += size;
    return planned + own;
}

// Reads of each node's output in this forward, as forward() makes them (for_each_read). A
// view reads nothing: it holds its producer's buffer itself, for its own readers.
void Net::plan_begin(bool fold) {
    plan_left_.assign(nodes_.size(), 0);
    plan_held_.assign(nodes_.size(), SIZE_MAX);
    for (PlanBuffer& b : plan_buffers_) b.holders = 0, b.lent = false;
    for (const Node& n : nodes_)
        for_each_read(n, fold, [&](size_t j) {
            if (!is_model_input(j)) ++plan_left_[j];
        });
}

// Lends `layer` the smallest free buffer that holds its output (a new one of its output's size
// when none does: a network's first maps are its largest, and later, smaller ones reuse their
// buffers), and returns the layer (null when it takes no loan) for the Loan that ends it.
Layer* Net::plan_lend(Device& dev, Layer& layer, const Shape& sample, int64_t batch) {
    if (!layer.takes_lent_output()) return nullptr;
    const int64_t n = batch * numel(sample);
    const size_t b = best_fit(plan_buffers_.size(), n, [&](size_t k) { return plan_buffers_[k].buffer.numel(); },
                              [&](size_t k) { return plan_buffers_[k].holders == 0; });
    PlanBuffer* free = b < plan_buffers_.size()
                           ? &plan_buffers_[b]
                           : &plan_buffers_.emplace_back(PlanBuffer{Tensor({n}, DType::F32, dev), 0, false});
    free->lent = true;
    layer.lend_output(free->buffer);
    return &layer;
}

// Buffers this forward did not use (another batch size's) are let go, as a layer's own output
// buffer is when the batch size changes. Only between forwards: plan_held_ indexes the list, and
// plan_begin sets it afresh.
void Net::plan_end() {
    std::erase_if(plan_buffers_, [](const PlanBuffer& b) { return !b.lent && b.holders == 0; });
}

size_t Net::plan_bytes() const {
    size_t bytes = 0;
    for (const PlanBuffer& b : plan_buffers_) bytes += b.buffer.bytes();
    return bytes;
}

void Net::plan_produced(size_t i) {
    plan_held_[i] = SIZE_MAX;
    const Tensor* t = outputs_[i];
    for (size_t b = 0; t && t->defined() && b < plan_buffers_.size(); ++b)
        if (t->shares_storage(plan_buffers_[b].buffer)) {
            plan_held_[i] = b;
            ++plan_buffers_[b].holders;
            break;
        }
    if (plan_left_[i] == 0) plan_release(i);  // read by nobody (or only through its views)
}

void Net::plan_read(size_t j) {
    if (is_model_input(j) || plan_left_[j] == 0) return;
    if (--plan_left_[j] == 0) plan_release(j);
}

void Net::plan_release(size_t j) {
    if (nodes_[j].is_output || plan_held_[j] == SIZE_MAX) return;  // a model output lives on
    --plan_buffers_[plan_held_[j]].holders;
    plan_held_[j] = SIZE_MAX;
}

}  // namespace xylem
