// Character-by-character generation: a forward step on the device, a draw on the host.
#include "xylem/train/sample.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "xylem/error.h"

namespace xylem::train {
namespace {

// softmax(log p / temperature) in double, shifted by the largest term so that no exp overflows.
// The outputs are turned into log-probabilities up to a constant first (logits already are one).
void distribution(const float* out, int64_t n, OutputKind kind, double temperature, std::vector<double>& p,
                  int64_t step) {
    double top = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
        const double x = kind == OutputKind::probabilities ? std::log(static_cast<double>(out[j])) : out[j];
        if (std::isnan(x) || x == INFINITY)
            throw Error("sample: the model's outputs are not finite at character " + std::to_string(step) +
                        " (a diverged checkpoint?)");
        p[static_cast<size_t>(j)] = x / temperature;
        top = std::max(top, p[static_cast<size_t>(j)]);
    }
    double sum = 0;
    for (double& v : p) sum += v = std::exp(v - top);
    for (double& v : p) v /= sum;
}

// Keeps the k largest probabilities (ties at the k-th value kept, as torch.topk's cut-off with
// nanoGPT's `logits < v[-1]` test) and renormalises.
void keep_top_k(std::vector<double>& p, int64_t k) {
    if (k <= 0 || k >= static_cast<int64_t>(p.size())) return;
    std::vector<double> sorted = p;
    std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<double>());
    const double cut = sorted[static_cast<size_t>(k - 1)];
    double sum = 0;
    for (double& v : p) sum += v = v < cut ? 0.0 : v;
    for (double& v : p) v /= sum;
}

// Decoding on for the sampler's lifetime, off again whatever happens.
struct DecodingScope {
    Net& model;
    bool on;
    DecodingScope(Net& m, bool enable) : model(m), on(enable) {
        if (on) model.set_decoding(true);
    }
    ~DecodingScope() {
        if (on) model.set_decoding(false);
    }
};

// Index i with probability p[i]: u uniform in [0, 1) from 53 bits of the generator (the same on
// every platform, unlike std::discrete_distribution), against the running sum.
int32_t draw(const std::vector<double>& p, std::mt19937_64& rng) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    double acc = 0;
    int32_t last = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] <= 0) continue;
        last = static_cast<int32_t>(i);
        acc += p[i];
        if (u < acc) return last;
    }
    return last;  // rounding left u above the sum: the last possible index
}

}  // namespace

std::string sample_text(Net& model, Device& dev, const Vocabulary& vocab, const SampleOptions& o) {
    if (!(o.temperature > 0)) throw Error("sample: the temperature must be positive");
    if (o.top_k < 0) throw Error("sample: top_k must be >= 0 (0: every character)");
    const std::vector<int32_t> prime = vocab.encode(o.prime, "--prime");
    const int64_t n = vocab.size();
    const int64_t context = model.max_positions();  // 0: a recurrent model, no limit
    if (context && static_cast<int64_t>(prime.size()) > context)
        throw Error("sample: the prime is " + std::to_string(prime.size()) + " characters, longer than the model's context of " +
                    std::to_string(context) + " (its position_embedding max_len)");
    model.reset_state();
    DecodingScope decoding(model, context > 0);
    Tensor x({1, 1}, DType::I32, dev);
    std::mt19937_64 rng(o.seed);
    std::vector<double> p(static_cast<size_t>(n), 1.0 / static_cast<double>(n));  // before any input: uniform
    std::vector<int32_t> history;  // what the cache holds, for a restart at the context's end
    int64_t steps = 0;
    // One forward of `tokens` (one step, or a transformer's whole prefix at once); the draw's
    // distribution comes from the last position's outputs.
    auto step = [&](const std::vector<int32_t>& tokens) {
        const int64_t t = static_cast<int64_t>(tokens.size());
        if (x.numel() != t) x = Tensor({1, t}, DType::I32, dev);
        std::copy(tokens.begin(), tokens.end(), x.host_write<int32_t>());
        const Tensor& y = model.forward(dev, x, false);
        if (y.numel() != t * n)
            throw Error("sample: the model outputs " + to_string(y.shape()) + " for " + std::to_string(t) +
                        " character(s), expected [1, " + std::to_string(t) + ", " + std::to_string(n) + "]");
        steps += t;
        distribution(y.host_read<float>() + (t - 1) * n, n, o.output, o.temperature, p, steps);
        keep_top_k(p, o.top_k);
    };
    auto feed = [&](int32_t token) {
        if (context && static_cast<int64_t>(history.size()) == context) {
            // The cache is full: keep the last half of the context and recompute its keys and values,
            // in one forward.
            history.erase(history.begin(), history.end() - context / 2);
            model.reset_state();
            step(history);
        }
        history.push_back(token);
        step({token});
    };
    if (context && !prime.empty()) {  // a transformer reads its prime in one forward
        history = prime;
        step(prime);
    } else {
        for (int32_t t : prime) feed(t);
    }
    std::string text = o.prime;
    for (int64_t i = 0; i < o.length; ++i) {
        const int32_t t = draw(p, rng);
        text += vocab.byte(t);
        if (i + 1 < o.length) feed(t);
    }
    return text;
}

}  // namespace xylem::train
