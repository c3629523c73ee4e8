// Sequential container: shape checks, linear+activation fusion, forward and backward.
#include "xylem/layers/sequential.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "xylem/error.h"
#include "xylem/layers/elementwise.h"
#include "xylem/profiler.h"

namespace xylem {

void Sequential::add(std::unique_ptr<Layer> layer) {
    const size_t i = layers_.size();
    layer->set_label("model layer " + std::to_string(i) + " (" + layer->kind() + ")");
    layer->set_param_prefix(std::to_string(i) + ".");  // PyTorch nn.Sequential state_dict names
    layers_.push_back(std::move(layer));
}

void Sequential::build(Device& dev, const Shape& input_sample, uint64_t seed) {
    if (layers_.empty()) throw Error("model has no layers");
    std::mt19937_64 rng(seed);
    input_ = input_sample;
    fused_.assign(layers_.size(), false);
    shapes_.clear();
    Shape shape = input_sample;
    for (size_t i = 0; i < layers_.size(); ++i) {
        layers_[i]->bind(dev, shape, rng);
        shape = layers_[i]->output_shape(shape);
        shapes_.push_back(shape);
        auto* act = dynamic_cast<Activation*>(layers_[i].get());
        if (act && i > 0 && !fused_[i - 1]) fused_[i] = layers_[i - 1]->fuse_activation(act->activation(), dev.backend());
    }
    output_ = shape;
    check_ops(dev.backend(), false);  // inference needs the forward ops; train() checks backward too
    forward_scopes_.clear();
    backward_scopes_.clear();
    for (auto& l : layers_) {
        forward_scopes_.push_back(l->label() + " forward");
        backward_scopes_.push_back(l->label() + " backward");
    }
}

DType Sequential::input_dtype() const {
    if (layers_.empty()) throw Error("model has no layers");
    return layers_.front()->input_dtype();
}

void Sequential::check_ops(Backend& backend, bool backward) const {
    for (size_t i = 0; i < layers_.size(); ++i)
        if (!fused_[i])
            for (uint32_t op : layers_[i]->ops_needed(backward)) backend.require(op, layers_[i]->label());
}

const Tensor& Sequential::forward(Device& dev, const Tensor& x, bool train) {
    if (!output_.size() && layers_.size()) throw Error("model used before build()");
    Shape sample(x.shape().begin() + (x.shape().empty() ? 0 : 1), x.shape().end());
    if (x.shape().empty() || sample != input_)
        throw Error("model input: got batch shape " + to_string(x.shape()) + ", expected [N" +
                    (input_.empty() ? "" : ", ") + to_string(input_).substr(1));
    if (x.dtype() != input_dtype())
        throw Error("model input: got " + std::string(dtype_name(x.dtype())) + " values, " + layers_.front()->label() +
                    " takes " + dtype_name(input_dtype()));
    const Tensor* cur = &x;
    for (size_t i = 0; i < layers_.size(); ++i) {
        if (fused_[i]) continue;
        profiler::Scope scope(&forward_scopes_[i]);
        cur = &layers_[i]->forward(dev, *cur, train);
    }
    return *cur;
}

void Sequential::backward(Device& dev, const Tensor& dy) {
    const Tensor* cur = &dy;
    size_t first = 0;
    while (first < layers_.size() && layers_[first]->params().empty()) ++first;  // nothing to learn before it
    for (size_t i = layers_.size(); i-- > first;) {
        if (fused_[i]) continue;
        {
            profiler::Scope scope(&backward_scopes_[i]);
            cur = &layers_[i]->backward(dev, *cur, i > first);
        }
        if (backward_hook_ && !layers_[i]->params().empty()) backward_hook_(i);
    }
}

std::vector<Param*> Sequential::params() {
    std::vector<Param*> out;
    for (auto& l : layers_)
        for (Param* p : l->params()) out.push_back(p);
    return out;
}

std::vector<Param*> Sequential::state() {
    std::vector<Param*> out = params();
    for (auto& l : layers_)
        for (Param* p : l->buffers()) out.push_back(p);
    return out;
}

std::vector<std::pair<std::string, uint64_t*>> Sequential::counters() {
    std::vector<std::pair<std::string, uint64_t*>> out;
    for (size_t i = 0; i < layers_.size(); ++i)
        for (auto& [name, value] : layers_[i]->counters()) out.emplace_back(std::to_string(i) + "." + name, value);
    return out;
}

namespace {

std::string grouped(int64_t n) {  // 109386 -> "109,386"
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

std::string bytes_text(double bytes) {
    char buf[32];
    if (bytes >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else if (bytes >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024));
    else std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
    return buf;
}

}  // namespace

std::string Sequential::summary() const {
    std::vector<std::array<std::string, 4>> rows{{"#", "layer", "output shape", "parameters"}};
    int64_t trainable = 0, buffers = 0, activations = 0;
    for (size_t i = 0; i < layers_.size(); ++i) {
        int64_t n = 0;
        for (Param* p : layers_[i]->params()) n += p->value.numel();
        for (Param* p : layers_[i]->buffers()) buffers += p->value.numel();
        trainable += n;
        std::string shape = i < shapes_.size() ? to_string(shapes_[i]) : "?";
        if (fused_.size() > i && fused_[i]) shape += " (fused into " + std::to_string(i - 1) + ")";
        else if (i < shapes_.size()) activations += numel(shapes_[i]);
        rows.push_back({std::to_string(i), layers_[i]->kind(), shape, grouped(n)});
    }
    size_t width[4] = {0, 0, 0, 0};
    for (const auto& r : rows)
        for (size_t c = 0; c < 4; ++c) width[c] = std::max(width[c], r[c].size());
    std::string s;
    for (const auto& r : rows) {
        s += "  " + std::string(width[0] - r[0].size(), ' ') + r[0] + "  " + r[1] + std::string(width[1] - r[1].size(), ' ') +
             "  " + r[2] + std::string(width[2] - r[2].size(), ' ') + "  " + std::string(width[3] - r[3].size(), ' ') + r[3] +
             "\n";
    }
    const double f32 = 4.0;
    s += "  parameters: " + grouped(trainable) + " trainable (" + bytes_text(f32 * static_cast<double>(trainable)) +
         ", as much again for gradients)";
    if (buffers) s += ", " + grouped(buffers) + " in buffers (" + bytes_text(f32 * static_cast<double>(buffers)) + ")";
    s += "; layer outputs: " + bytes_text(f32 * static_cast<double>(activations)) + " per sample\n";
    return s;
}

void Sequential::reset_state() {
    for (auto& l : layers_) l->reset_state();
}

std::vector<std::pair<std::string, const Tensor*>> Sequential::carried_state() {
    std::vector<std::pair<std::string, const Tensor*>> out;
    for (size_t i = 0; i < layers_.size(); ++i)
        for (auto& [name, t] : layers_[i]->carried_state()) out.emplace_back(std::to_string(i) + "." + name, t);
    return out;
}

void Sequential::restore_carried_state(const std::map<std::string, SavedTensor>& saved) {
    std::vector<std::map<std::string, SavedTensor>> per_layer(layers_.size());
    for (const auto& [name, t] : saved) {
        const size_t dot = name.find('.');
        size_t i = layers_.size();
        if (dot != std::string::npos && dot > 0 && dot <= 4 &&
            name.find_first_not_of("0123456789") == dot)
            i = static_cast<size_t>(std::stoul(name.substr(0, dot)));
        if (i >= layers_.size())
            throw Error("carried state '" + name + "' names no layer of the model (" + std::to_string(layers_.size()) +
                        " layers)");
        per_layer[i].emplace(name.substr(dot + 1), t);
    }
    for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->restore_carried_state(per_layer[i]);
}

}  // namespace xylem
