// lstm and gru against PyTorch's nn.LSTM and nn.GRU (batch_first, 2 layers) on every available
// backend: the same weights (set by a formula) in PyTorch's state_dict layout, two consecutive
// batches with the state carried from the first into the second (detached: truncated BPTT), and
// J = sum(r * y) of the second backpropagated. The numbers below are PyTorch's, in float64, printed
// by tests/layers/recurrent_torch_reference.py (run by hand; no test runs python): a change to the
// formulas or sizes here must be made there too and the numbers printed again.
#include <cmath>
#include <memory>

#include "support/backends.h"
#include "support/gradcheck.h"
#include "xylem/layers/gru.h"
#include "xylem/layers/lstm.h"

namespace xylem::test {
namespace {

constexpr int64_t kBatch = 2, kTime = 3, kFeatures = 3, kHidden = 2, kLayers = 2;

// The formulas of recurrent_torch_reference.py.
double param_value(size_t p, int64_t k) { return 0.5 * std::sin(0.7 * k + 1.3 * static_cast<double>(p) + 0.1); }
double x_value(int batch, int64_t k) { return batch == 0 ? 1.5 * std::sin(0.9 * k + 0.5) : 1.5 * std::cos(0.45 * k + 0.2); }
double r_value(int64_t k) { return std::sin(1.1 * k); }

// PyTorch's numbers (recurrent_torch_reference.py's output, pasted).
// lstm: parameters in order weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, weight_ih_l1, weight_hh_l1, bias_ih_l1, bias_hh_l1
const std::vector<double> kLstmY = {-0.2854969275, -0.2810632004, -0.3252963461, -0.2843456892, -0.3173692436, -0.2877829016, -0.2784771774, -0.2683201959, -0.2755963939, -0.2922214161, -0.2802487252, -0.3057121586};
const std::vector<double> kLstmDx = {-0.007898755318, -0.004087235376, 0.001646575228, -0.0008800936927, 0.002822956687, 0.005198326428, 0.00970104097, 0.0007299333318, -0.008584473358, -0.006459980536, 0.001373937873, 0.008561671832, 0.01150140616, 0.003359322057, -0.006362703701, -0.0009194283217, -0.009943101104, -0.01429037807};
const std::vector<std::vector<double>> kLstmDparams = {
    {0.01191880617, 0.01177182993, 0.009281014128, -0.0293519378, -0.01791893471, -0.002918167877, 0.002377388804, -0.001511868061, -0.005100103232, -0.009304072117, -0.007866011082, -0.004861781655, 0.07357615664, 0.04315416702, 0.004139932655, 0.04175420857, 0.03083289554, 0.01377257431, 0.004068507026, 0.00418031529, 0.003459798554, -0.01681841054, -0.009333761612, 9.293342962e-06},
    {0.002446696906, -0.004619183068, -0.001445565484, 0.005652275983, -0.0003222941873, 0.000359478923, -0.0002342840843, 0.001426478912, 0.002562349601, -0.007841173631, 0.001643018029, -0.006203133366, 0.0009990880009, -0.001652639272, -0.001183812798, 0.003849806078},
    {0.01027800882, -0.01263621704, 0.001490080532, -0.002680233905, 0.06528993222, 0.03108648542, 0.004680048, -0.003951389744},
    {0.01027800882, -0.01263621704, 0.001490080532, -0.002680233905, 0.06528993222, 0.03108648542, 0.004680048, -0.003951389744},
    {0.005826513457, -0.007158487981, 0.009846738153, 0.00293907784, 0.006289545598, -0.006748728995, 0.007666124174, 0.001566641896, -0.01656018877, 0.01808110125, -0.02173182801, -0.01560010571, 0.01105866353, -0.02174280715, 0.00803489587, 0.005200676791},
    {-0.01519740533, -0.01461488605, -0.03004471316, -0.03022719492, -0.01699624218, -0.01630376753, -0.0226025135, -0.02248618105, 0.03545581754, 0.03480685885, 0.06328314088, 0.06310251104, -0.02133766846, -0.0194513853, -0.01011743236, -0.01130133043},
    {0.04728389779, 0.0954080924, 0.05310253564, 0.07264154941, -0.1117407224, -0.1986779883, 0.05840802844, 0.02376293728},
    {0.04728389779, 0.0954080924, 0.05310253564, 0.07264154941, -0.1117407224, -0.1986779883, 0.05840802844, 0.02376293728},
};
// gru: parameters in order weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, weight_ih_l1, weight_hh_l1, bias_ih_l1, bias_hh_l1
const std::vector<double> kGruY = {-0.5521322186, -0.528353214, -0.6274724572, -0.5227457021, -0.6730089397, -0.4781657665, -0.5335175917, -0.5202818455, -0.5268038737, -0.5609014715, -0.520766075, -0.6000235077};
const std::vector<double> kGruDx = {-0.0054600326, -0.001799101313, 0.002707975433, 0.03114262695, 0.02065426389, 0.0004518777814, 0.001613723209, -0.008543018282, -0.01468184479, -0.01844218631, -0.009040599192, 0.004612922994, 0.03100987156, 0.01312165963, -0.01093787386, 0.04737642767, 0.003166521692, -0.04253264891};
const std::vector<std::vector<double>> kGruDparams = {
    {0.008252083778, 0.001872575016, -0.004879774284, 0.005470908059, 0.006885314268, 0.006928814504, -0.0307141143, -0.04700823147, -0.05394273733, 0.03515568013, 0.02213184655, 0.004701434056, 0.2467606873, 0.121829239, -0.02735911687, 0.04856495212, 0.05614366397, 0.05254384695},
    {-0.0003284365689, 0.0004046150745, 0.000509441275, -0.0008121587263, -0.004145683529, 0.01503489085, -0.001244691558, -0.003336387572, -0.008957157442, -0.008919035904, 0.0009167434871, -0.003679031852},
    {0.01229908585, 0.005649500401, 0.007279064611, 0.02770878113, 0.275833758, 0.05215234909},
    {0.01229908585, 0.005649500401, 0.007279064611, 0.02770878113, 0.1352154277, 0.02251484376},
    {0.004752259337, -0.0008748497098, 0.001353867469, 0.03777580575, 0.006742876846, -0.01495676334, 0.002210361965, 0.01199006832, -0.07107152912, -0.004022291444, -0.009050967234, -0.3312270928},
    {-0.0112872867, -0.01168425742, -0.03424987066, -0.0329315438, 0.008055294284, 0.005797972922, -0.01242026618, -0.0087800507, 0.09458356713, 0.09782767934, 0.1429056411, 0.1368588341},
    {0.0197386669, 0.05741585491, -0.01122336639, 0.02207933131, -0.3023766995, -0.4829786512},
    {0.0197386669, 0.05741585491, -0.01122336639, 0.02207933131, -0.1640277666, -0.2368293787},
};

// max|got - want| relative to max|want|: these gradients are small, so the usual max(1, .) scale
// would hide a wrong one.
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<double>& want) {
    double scale = 0.0;
    for (double w : want) scale = std::max(scale, std::fabs(w));
    std::vector<double> scaled(want.size());
    std::vector<float> got_scaled(got.size());
    for (size_t i = 0; i < want.size(); ++i) scaled[i] = want[i] / scale;
    for (size_t i = 0; i < got.size(); ++i) got_scaled[i] = static_cast<float>(got[i] / scale);
    return near(got_scaled, scaled, 1e-5);
}

class RecurrentTorch : public BackendTest {
protected:
    void check(bool lstm, const std::vector<double>& y_want, const std::vector<double>& dx_want,
               const std::vector<std::vector<double>>& dparams_want) {
        RecurrentOptions o;
        o.hidden = kHidden;
        o.layers = kLayers;
        std::unique_ptr<Recurrent> layer;
        if (lstm) layer = std::make_unique<Lstm>(o, 1);
        else layer = std::make_unique<Gru>(o, 1);
        for (uint32_t op : layer->ops_needed(true)) XYLEM_REQUIRE_OP(op);
        std::mt19937_64 rng(1);
        layer->bind(dev(), {kTime, kFeatures}, rng);
        const std::vector<Param*> params = layer->params();
        ASSERT_EQ(params.size(), dparams_want.size());
        for (size_t p = 0; p < params.size(); ++p) {
            std::vector<float> v(static_cast<size_t>(params[p]->value.numel()));
            for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(param_value(p, static_cast<int64_t>(k)));
            set_values(params[p]->value, v);
        }
        const Shape x_shape{kBatch, kTime, kFeatures};
        std::vector<float> x1(static_cast<size_t>(numel(x_shape))), x2(x1.size()), r(static_cast<size_t>(kBatch * kTime * kHidden));
        for (size_t k = 0; k < x1.size(); ++k) {
            x1[k] = static_cast<float>(x_value(0, static_cast<int64_t>(k)));
            x2[k] = static_cast<float>(x_value(1, static_cast<int64_t>(k)));
        }
        for (size_t k = 0; k < r.size(); ++k) r[k] = static_cast<float>(r_value(static_cast<int64_t>(k)));
        layer->forward(dev(), upload(dev(), x_shape, x1), true);
        EXPECT_TRUE(close(layer->forward(dev(), upload(dev(), x_shape, x2), true).to_vector(), y_want)) << "output";
        EXPECT_TRUE(close(layer->backward(dev(), upload(dev(), {kBatch, kTime, kHidden}, r), true).to_vector(), dx_want))
            << "input gradient";
        for (size_t p = 0; p < params.size(); ++p)
            EXPECT_TRUE(close(params[p]->grad.to_vector(), dparams_want[p])) << "gradient of " << params[p]->name;
    }
};
XYLEM_INSTANTIATE_OVER_BACKENDS(RecurrentTorch);

TEST_P(RecurrentTorch, LstmMatchesNnLstm) { check(true, kLstmY, kLstmDx, kLstmDparams); }
TEST_P(RecurrentTorch, GruMatchesNnGru) { check(false, kGruY, kGruDx, kGruDparams); }

}  // namespace
}  // namespace xylem::test
