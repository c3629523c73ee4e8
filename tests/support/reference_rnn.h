// Naive float64 reference for the recurrent layers (lstm, gru), written from PyTorch's nn.LSTM and
// nn.GRU formulas with batch_first = True: plain loops, batch-major, nothing shared with the layer.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace xylem::ref {

struct RnnWeights {  // one level, PyTorch's layouts: w_ih [G*H, in], w_hh [G*H, H], biases [G*H]
    std::vector<double> w_ih, w_hh, b_ih, b_hh;
};

inline double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// Runs x [B, T, F] through the levels; h and c ([level][B*H]) hold the initial state and are left
// holding the final one (c unused by gru). Returns the top level's h of every step, [B, T, H].
inline std::vector<double> rnn_forward(bool lstm, const std::vector<RnnWeights>& levels, int64_t hidden,
                                       const std::vector<double>& x, int64_t batch, int64_t time, int64_t features,
                                       std::vector<std::vector<double>>& h, std::vector<std::vector<double>>& c) {
    const int64_t H = hidden, G = lstm ? 4 : 3;
    std::vector<double> in = x;
    int64_t in_f = features;
    for (size_t l = 0; l < levels.size(); ++l) {
        const RnnWeights& w = levels[l];
        std::vector<double> out(static_cast<size_t>(batch * time * H));
        for (int64_t b = 0; b < batch; ++b) {
            std::vector<double> hb(h[l].begin() + b * H, h[l].begin() + (b + 1) * H);
            std::vector<double> cb = lstm ? std::vector<double>(c[l].begin() + b * H, c[l].begin() + (b + 1) * H)
                                          : std::vector<double>();
            for (int64_t t = 0; t < time; ++t) {
                const double* xt = &in[static_cast<size_t>((b * time + t) * in_f)];
                std::vector<double> gi(static_cast<size_t>(G * H)), gh(static_cast<size_t>(G * H));
                for (int64_t j = 0; j < G * H; ++j) {
                    double si = w.b_ih[j], sh = w.b_hh[j];
                    for (int64_t k = 0; k < in_f; ++k) si += w.w_ih[j * in_f + k] * xt[k];
                    for (int64_t k = 0; k < H; ++k) sh += w.w_hh[j * H + k] * hb[k];
                    gi[j] = si;
                    gh[j] = sh;
                }
                std::vector<double> hn(static_cast<size_t>(H));
                for (int64_t u = 0; u < H; ++u) {
                    if (lstm) {
                        const double i = sigmoid(gi[u] + gh[u]), f = sigmoid(gi[H + u] + gh[H + u]);
                        const double g = std::tanh(gi[2 * H + u] + gh[2 * H + u]);
                        const double o = sigmoid(gi[3 * H + u] + gh[3 * H + u]);
                        cb[u] = f * cb[u] + i * g;
                        hn[u] = o * std::tanh(cb[u]);
                    } else {
                        const double r = sigmoid(gi[u] + gh[u]), z = sigmoid(gi[H + u] + gh[H + u]);
                        const double n = std::tanh(gi[2 * H + u] + r * gh[2 * H + u]);
                        hn[u] = (1 - z) * n + z * hb[u];
                    }
                }
                hb = hn;
                for (int64_t u = 0; u < H; ++u) out[static_cast<size_t>((b * time + t) * H + u)] = hb[u];
            }
            for (int64_t u = 0; u < H; ++u) {
                h[l][b * H + u] = hb[u];
                if (lstm) c[l][b * H + u] = cb[u];
            }
        }
        in = out;
        in_f = H;
    }
    return in;
}

}  // namespace xylem::ref
