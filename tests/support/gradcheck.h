// Numerical gradient checking: central differences in float64 over the float32 forward pass,
// perturbing tensors in place on the host (they are uploaded again when the device reads them).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "support/backends.h"
#include "xylem/layers/layer.h"
#include "xylem/tensor.h"

namespace xylem::test {

// Tolerance on the normalized error between analytic and numerical gradients: the numerical
// one carries float32 forward rounding divided by 2*eps plus O(eps^2) truncation (up to about
// 3e-5 on the native backend at eps = 1e-2), while a wrong gradient is off by a sizeable
// fraction of its magnitude.
constexpr double kGradEps = 1e-2;
constexpr double kGradTol = 2e-4;

// Overwrites a tensor's contents from the host.
inline void set_values(Tensor& t, const std::vector<float>& values) {
    ASSERT_EQ(static_cast<int64_t>(values.size()), t.numel()) << "test bug: value count for " << to_string(t.shape());
    std::memcpy(t.host_write<float>(), values.data(), values.size() * sizeof(float));
}

// J = sum(r * y), computed in double from the float output: dJ/dy = r.
inline double weighted_sum(const Tensor& y, const std::vector<double>& r) {
    const std::vector<float> v = y.to_vector();
    EXPECT_EQ(v.size(), r.size()) << "output " << to_string(y.shape()) << " does not match the weights";
    double s = 0.0;
    for (size_t i = 0; i < v.size() && i < r.size(); ++i) s += r[i] * v[i];
    return s;
}

// dJ/dt by central differences: each element moved by +-eps (the step actually taken is the
// difference of the two rounded floats), then restored.
inline std::vector<double> numeric_gradient(Tensor& t, const std::function<double()>& objective, double eps) {
    std::vector<double> g(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < g.size(); ++i) {
        const float orig = t.host_read<float>()[i];
        const float hi = orig + static_cast<float>(eps), lo = orig - static_cast<float>(eps);
        t.host_read_write<float>()[i] = hi;
        const double j_hi = objective();
        t.host_read_write<float>()[i] = lo;
        const double j_lo = objective();
        t.host_read_write<float>()[i] = orig;
        g[i] = (j_hi - j_lo) / (static_cast<double>(hi) - static_cast<double>(lo));
    }
    return g;
}

// Checks dJ/dx and every parameter gradient of `layer` at input x against central differences,
// for J = sum(r * y) with random weights r. Forward runs in training mode.
inline void check_layer_gradients(Device& dev, Layer& layer, Tensor& x, Rng& rng, double eps = kGradEps,
                                  double tol = kGradTol) {
    const Shape out_shape = layer.forward(dev, x, true).shape();
    const std::vector<double> r = to_double(rng.uniform(numel(out_shape), -1.0f, 1.0f));
    auto objective = [&] { return weighted_sum(layer.forward(dev, x, true), r); };
    objective();
    const Tensor dy = upload(dev, out_shape, to_float(r));  // backward may return dy itself: keep it alive
    const Tensor& dx = layer.backward(dev, dy, true);
    ASSERT_EQ(dx.shape(), x.shape());
    const std::vector<float> analytic_dx = dx.to_vector();
    std::vector<std::vector<float>> analytic_params;
    for (Param* p : layer.params()) analytic_params.push_back(p->grad.to_vector());

    EXPECT_TRUE(near(analytic_dx, numeric_gradient(x, objective, eps), tol)) << "input gradient";
    size_t i = 0;
    for (Param* p : layer.params())
        EXPECT_TRUE(near(analytic_params[i++], numeric_gradient(p->value, objective, eps), tol))
            << "gradient of parameter " << p->name;
}

// Draws x [n, in], weight [out, in] and (when given) bias [out] so that every pre-activation
// x*W^T + b stays at least `margin` from 0: no central difference then straddles ReLU's kink.
inline void draw_away_from_kink(Rng& rng, Tensor& x, Tensor& weight, Tensor* bias, double margin) {
    const int64_t n = x.dim(0), in = x.numel() / n, out = weight.dim(0);
    for (int attempt = 0; attempt < 1000; ++attempt) {
        const auto xv = rng.uniform(n * in), w = rng.uniform(out * in), b = rng.uniform(out);
        double closest = 1e9;
        for (int64_t r = 0; r < n; ++r)
            for (int64_t o = 0; o < out; ++o) {
                double z = bias ? b[static_cast<size_t>(o)] : 0.0;
                for (int64_t i = 0; i < in; ++i) z += static_cast<double>(xv[r * in + i]) * w[o * in + i];
                closest = std::min(closest, std::fabs(z));
            }
        if (closest < margin) continue;
        set_values(x, xv);
        set_values(weight, w);
        if (bias) set_values(*bias, b);
        return;
    }
    FAIL() << "test bug: no draw keeps the pre-activations away from 0";
}

}  // namespace xylem::test
