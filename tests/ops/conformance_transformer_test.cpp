// Conformance, transformer family (ABI 1.7): layer_norm_fwd/bwd (with and without beta, the
// gradient accumulated or not), attention_fwd/bwd (odd head sizes, T = 1, causal bottom-right,
// a key/value cache with kv_length < Tk, decoding with Tq = 1, masks of rank 2 and 4 broadcast,
// dropout, rows with no visible key; the fused op against its composition), gemm_batched (2-D
// operands broadcast, transposes, beta), permute (ranks 2 to 5, the head split) and
// masked_softmax (with LSE). Every output starts as NaN, so an element left unwritten shows.
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ops/conformance.h"
#include "support/backends.h"
#include "support/reference_transformer.h"
#include "xylem/op_calls.h"

namespace xylem::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor nans(Device& dev, const Shape& s) {
    return upload(dev, s, std::vector<float>(static_cast<size_t>(numel(s)), kNaN));
}

std::string dims_text(const ref::Dims& d) {
    return d.empty() ? "none" : to_string(Shape(d.begin(), d.end()));
}

// ---- layer norm ------------------------------------------------------------------------------
class LayerNormConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(LayerNormConformance);

std::vector<Shape> layer_norm_shapes() {
    return {{1, 1}, {1, 7}, {7, 33}, {2, 3, 129}, {5, 1000}, {300, 24}, {16}};
}

int64_t rows_of(const Shape& s) {
    return numel(s) / s.back();
}

TEST_P(LayerNormConformance, Forward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_LAYER_NORM_FWD);
    Rng rng;
    for (bool with_beta : {true, false})
        for (const Shape& s : layer_norm_shapes()) {
            SCOPED_TRACE(std::string(with_beta ? "beta" : "no beta") + " shape " + to_string(s));
            const int64_t d = s.back(), rows = rows_of(s);
            auto x = rng.uniform(numel(s), -2.0f, 2.0f);
            for (float& v : x) v += 3.0f;  // an offset the mean must remove (E[x^2] - E[x]^2 would cancel)
            const auto gamma = rng.uniform(d, 0.5f, 1.5f), beta = rng.uniform(d, -1.0f, 1.0f);
            Tensor tx = upload(dev(), s, x), tg = upload(dev(), {d}, gamma), tb = upload(dev(), {d}, beta);
            Tensor ty = nans(dev(), s), tm = nans(dev(), {rows}), tr = nans(dev(), {rows});
            ops::layer_norm_fwd(dev(), tx, tg, with_beta ? &tb : nullptr, ty, tm, tr, 1e-5f);
            const auto want =
                    ref::layer_norm_fwd(to_double(x), rows, d, to_double(gamma), with_beta ? to_double(beta) : ref::Vec{}, 1e-5);
            EXPECT_TRUE(near(ty.to_vector(), want.y, tol::layer_norm(d)));
            EXPECT_TRUE(near(tm.to_vector(), want.mean, tol::layer_norm(d)));
            EXPECT_TRUE(near(tr.to_vector(), want.rstd, tol::layer_norm(d)));
        }
}

TEST_P(LayerNormConformance, Backward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_LAYER_NORM_BWD);
    Rng rng;
    for (bool with_beta : {true, false})
        for (float acc : {0.0f, 1.0f})
            for (const Shape& s : layer_norm_shapes()) {
                SCOPED_TRACE(std::string(with_beta ? "dbeta" : "no dbeta") + " accumulate " + std::to_string(acc) +
                             " shape " + to_string(s));
                const int64_t d = s.back(), rows = rows_of(s);
                const auto x = rng.uniform(numel(s), -2.0f, 2.0f), dy = rng.uniform(numel(s), -1.0f, 1.0f);
                const auto gamma = rng.uniform(d, 0.5f, 1.5f);
                // mean and rstd as a forward pass saved them (float).
                const auto fwd = ref::layer_norm_fwd(to_double(x), rows, d, to_double(gamma), {}, 1e-5);
                const auto mean = to_float(fwd.mean), rstd = to_float(fwd.rstd);
                const auto old_g = rng.uniform(d), old_b = rng.uniform(d);
                Tensor tdy = upload(dev(), s, dy), tx = upload(dev(), s, x), tg = upload(dev(), {d}, gamma);
                Tensor tm = upload(dev(), {rows}, mean), tr = upload(dev(), {rows}, rstd), tdx = nans(dev(), s);
                Tensor tdg = acc != 0.0f ? upload(dev(), {d}, old_g) : nans(dev(), {d});
                Tensor tdb = acc != 0.0f ? upload(dev(), {d}, old_b) : nans(dev(), {d});
                ops::layer_norm_bwd(dev(), tdy, tx, tg, tm, tr, tdx, tdg, with_beta ? &tdb : nullptr, 1e-5f, acc);
                const auto want = ref::layer_norm_bwd(to_double(dy), to_double(x), rows, d, to_double(gamma),
                                                      to_double(mean), to_double(rstd), acc, to_double(old_g),
                                                      to_double(old_b));
                const double t = tol::layer_norm_bwd(d, rows);
                EXPECT_TRUE(near(tdx.to_vector(), want.dx, t)) << "dX";
                EXPECT_TRUE(near(tdg.to_vector(), want.dgamma, t)) << "dgamma";
                if (with_beta) {
                    EXPECT_TRUE(near(tdb.to_vector(), want.dbeta, t)) << "dbeta";
                }
            }
}

// ---- attention -------------------------------------------------------------------------------
class AttentionConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(AttentionConformance);

struct AttentionCase {
    AttentionCase(const char* n, ref::AttentionDims dims, bool c = false, int64_t kv = 0, ref::Dims m = {},
                  float p = 0.0f, bool inf_rows = false)
        : name(n), d(dims), causal(c), kv_length(kv), mask_dims(std::move(m)), dropout_p(p), minus_inf_rows(inf_rows) {}
    const char* name;
    ref::AttentionDims d;
    bool causal;
    int64_t kv_length;
    ref::Dims mask_dims;  // with L as the last dim
    float dropout_p;
    bool minus_inf_rows;  // mask whole rows with -inf (a padded query)
};

std::vector<AttentionCase> attention_cases() {
    std::vector<AttentionCase> c;
    c.push_back({"basic", {2, 3, 17, 17, 16, 16}});
    c.push_back({"T=1", {1, 2, 1, 1, 1, 1}});
    c.push_back({"T=1 causal", {1, 1, 1, 1, 8, 8}, true});
    for (int64_t dh : {1, 3, 17, 33, 64}) {
        c.push_back({"head size", {2, 2, 21, 21, dh, dh}});
        c.push_back({"head size causal", {1, 3, 19, 19, dh, dh}, true});
    }
    c.push_back({"Dk != Dv", {2, 2, 9, 9, 5, 12}, true});
    c.push_back({"Tq < Tk causal", {2, 2, 5, 20, 8, 8}, true});
    c.push_back({"Tq > Tk causal: first rows see nothing", {1, 2, 7, 4, 8, 8}, true});
    c.push_back({"cache kv_length < Tk", {2, 2, 5, 20, 8, 8}, true, 13});
    c.push_back({"decode Tq=1 from a cache", {2, 3, 1, 16, 16, 16}, true, 9});
    c.push_back({"decode Tq=1 full", {2, 3, 1, 70, 16, 16}, true});
    c.push_back({"mask [Tq, L]", {2, 2, 6, 11, 8, 8}, false, 0, {6, 11}});
    c.push_back({"mask [B, 1, 1, L] (padding)", {3, 2, 6, 6, 8, 8}, false, 0, {3, 1, 1, 6}});
    c.push_back({"mask [1, H, Tq, L]", {2, 3, 5, 7, 4, 4}, true, 0, {1, 3, 5, 7}});
    c.push_back({"mask [B, H, Tq, L]", {2, 2, 5, 7, 4, 4}, false, 0, {2, 2, 5, 7}});
    c.push_back({"mask [B, 1, Tq, L] with a cache", {2, 2, 3, 12, 4, 4}, true, 8, {2, 1, 3, 8}});
    c.push_back({"mask rows all -inf", {2, 2, 6, 6, 8, 8}, false, 0, {2, 1, 6, 6}, 0.0f, true});
    c.push_back({"dropout", {2, 3, 13, 13, 8, 8}, false, 0, {}, 0.2f});
    c.push_back({"dropout causal masked", {2, 2, 9, 9, 8, 8}, true, 0, {9, 9}, 0.5f});
    // Several blocks of 64 queries and keys, one head (the backward's split pass on any machine) and
    // several (its one-pass form where the heads keep every CPU busy).
    c.push_back({"long, one head", {1, 1, 150, 150, 32, 32}, true});
    c.push_back({"long, one head, not causal", {1, 1, 130, 97, 24, 24}, false, 0, {130, 97}});
    c.push_back({"long, many heads", {3, 4, 130, 130, 16, 16}, true});
    c.push_back({"long cache", {2, 1, 70, 200, 16, 16}, true, 150});
    c.push_back({"long dropout", {1, 2, 100, 100, 16, 16}, true, 0, {}, 0.1f});
    return c;
}

struct AttentionData {
    std::vector<float> q, k, v, mask;
    xylem_attention_attrs at{};
    ref::AttentionOptions opt;
    Shape qs, ks, vs, os, ls, ms;
};

AttentionData attention_data(Rng& rng, const AttentionCase& c) {
    const ref::AttentionDims& d = c.d;
    AttentionData a;
    a.qs = {d.b, d.h, d.tq, d.dk};
    a.ks = {d.b, d.h, d.tk, d.dk};
    a.vs = {d.b, d.h, d.tk, d.dv};
    a.os = {d.b, d.h, d.tq, d.dv};
    a.ls = {d.b, d.h, d.tq};
    a.q = rng.uniform(numel(a.qs), -2.0f, 2.0f);
    a.k = rng.uniform(numel(a.ks), -2.0f, 2.0f);
    a.v = rng.uniform(numel(a.vs));
    a.opt.scale = 1.0 / std::sqrt(static_cast<double>(d.dk));
    a.opt.causal = c.causal;
    a.opt.dropout_p = c.dropout_p;
    a.opt.seed = 0x5eed0000u + static_cast<uint64_t>(d.tq * 131 + d.tk);
    a.opt.kv_length = c.kv_length;
    a.opt.mask_dims = c.mask_dims;
    if (!c.mask_dims.empty()) {
        a.ms = Shape(c.mask_dims.begin(), c.mask_dims.end());
        a.mask = rng.uniform(numel(a.ms), -2.0f, 2.0f);
        const int64_t l = c.mask_dims.back();
        if (c.minus_inf_rows)  // every other row of the mask hides every key
            for (int64_t r = 0; r < numel(a.ms) / l; r += 2)
                for (int64_t j = 0; j < l; ++j) a.mask[static_cast<size_t>(r * l + j)] = -kInf;
        else  // a few hidden keys
            for (size_t e = 3; e < a.mask.size(); e += 7) a.mask[e] = -kInf;
    }
    a.at = {static_cast<float>(a.opt.scale), c.causal ? 1 : 0, c.dropout_p, static_cast<int32_t>(c.kv_length),
            a.opt.seed};
    return a;
}

TEST_P(AttentionConformance, Forward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ATTENTION_FWD);
    Rng rng;
    for (const AttentionCase& c : attention_cases()) {
        const ref::AttentionDims& d = c.d;
        SCOPED_TRACE(std::string(c.name) + ": B " + std::to_string(d.b) + " H " + std::to_string(d.h) + " Tq " +
                     std::to_string(d.tq) + " Tk " + std::to_string(d.tk) + " Dk " + std::to_string(d.dk) + " Dv " +
                     std::to_string(d.dv) + " kv_length " + std::to_string(c.kv_length) + " mask " +
                     dims_text(c.mask_dims) + " p " + std::to_string(c.dropout_p));
        const AttentionData a = attention_data(rng, c);
        Tensor tq = upload(dev(), a.qs, a.q), tk = upload(dev(), a.ks, a.k), tv = upload(dev(), a.vs, a.v);
        Tensor tm = a.mask.empty() ? Tensor() : upload(dev(), a.ms, a.mask);
        Tensor to = nans(dev(), a.os), tl = nans(dev(), a.ls);
        ops::attention_fwd(dev(), tq, tk, tv, a.mask.empty() ? nullptr : &tm, to, tl, a.at);
        const auto want = ref::attention_fwd(to_double(a.q), to_double(a.k), to_double(a.v), to_double(a.mask), d, a.opt);
        const double t = tol::attention(ref::keys_used(d, a.opt));
        EXPECT_TRUE(near(to.to_vector(), want.o, t)) << "O";
        EXPECT_TRUE(near(tl.to_vector(), want.lse, t)) << "LSE";
    }
}

TEST_P(AttentionConformance, Backward) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ATTENTION_BWD);
    Rng rng;
    for (const AttentionCase& c : attention_cases()) {
        const ref::AttentionDims& d = c.d;
        SCOPED_TRACE(std::string(c.name) + ": B " + std::to_string(d.b) + " H " + std::to_string(d.h) + " Tq " +
                     std::to_string(d.tq) + " Tk " + std::to_string(d.tk) + " Dk " + std::to_string(d.dk) + " Dv " +
                     std::to_string(d.dv) + " kv_length " + std::to_string(c.kv_length) + " mask " +
                     dims_text(c.mask_dims) + " p " + std::to_string(c.dropout_p));
        const AttentionData a = attention_data(rng, c);
        const auto dout = rng.uniform(numel(a.os));
        // O and LSE as the forward pass gives them (the reference's, rounded to float): the backward
        // pass is checked on its own.
        const auto fwd = ref::attention_fwd(to_double(a.q), to_double(a.k), to_double(a.v), to_double(a.mask), d, a.opt);
        const auto o = to_float(fwd.o), lse = to_float(fwd.lse);
        Tensor tq = upload(dev(), a.qs, a.q), tk = upload(dev(), a.ks, a.k), tv = upload(dev(), a.vs, a.v);
        Tensor tm = a.mask.empty() ? Tensor() : upload(dev(), a.ms, a.mask);
        Tensor tdo = upload(dev(), a.os, dout), to = upload(dev(), a.os, o), tl = upload(dev(), a.ls, lse);
        Tensor tdq = nans(dev(), a.qs), tdk = nans(dev(), a.ks), tdv = nans(dev(), a.vs);
        ops::attention_bwd(dev(), tdo, tq, tk, tv, to, tl, a.mask.empty() ? nullptr : &tm, tdq, tdk, tdv, a.at);
        const auto want = ref::attention_bwd(to_double(dout), to_double(a.q), to_double(a.k), to_double(a.v), to_double(o),
                                             to_double(a.mask), d, a.opt);
        const double t = tol::attention_bwd(ref::keys_used(d, a.opt), d.tq);
        EXPECT_TRUE(near(tdq.to_vector(), want.dq, t)) << "dQ";
        EXPECT_TRUE(near(tdk.to_vector(), want.dk, t)) << "dK";
        EXPECT_TRUE(near(tdv.to_vector(), want.dv, t)) << "dV";
    }
}

// The plugin's fused op and the core's composition of it (gemm_batched, masked_softmax,
// dropout_fwd, softmax_bwd) agree: a model gives the same results whichever runs.
TEST_P(AttentionConformance, FusedMatchesComposed) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ATTENTION_FWD);
    XYLEM_REQUIRE_OP(XYLEM_OP_ATTENTION_BWD);
    for (uint32_t op : {XYLEM_OP_GEMM_BATCHED, XYLEM_OP_MASKED_SOFTMAX, XYLEM_OP_DROPOUT_FWD, XYLEM_OP_SOFTMAX_BWD,
                        XYLEM_OP_MUL, XYLEM_OP_COPY, XYLEM_OP_FILL})
        XYLEM_REQUIRE_HELPER_OP(op);
    Rng rng;
    const std::vector<AttentionCase> cases = {
            {"causal", {2, 3, 33, 33, 16, 16}, true},
            {"mask and dropout", {2, 2, 20, 20, 8, 12}, false, 0, {2, 1, 20, 20}, 0.25f},
            {"cache", {1, 2, 4, 24, 8, 8}, true, 17},
            {"long", {1, 2, 100, 100, 32, 32}, true},
    };
    for (const AttentionCase& c : cases) {
        SCOPED_TRACE(c.name);
        const ref::AttentionDims& d = c.d;
        const AttentionData a = attention_data(rng, c);
        const auto dout = rng.uniform(numel(a.os));
        Tensor tq = upload(dev(), a.qs, a.q), tk = upload(dev(), a.ks, a.k), tv = upload(dev(), a.vs, a.v);
        Tensor tm = a.mask.empty() ? Tensor() : upload(dev(), a.ms, a.mask);
        const Tensor* mask = a.mask.empty() ? nullptr : &tm;
        Tensor tdo = upload(dev(), a.os, dout);
        Tensor o1 = nans(dev(), a.os), l1 = nans(dev(), a.ls), o2 = nans(dev(), a.os), l2 = nans(dev(), a.ls);
        ops::attention_fwd(dev(), tq, tk, tv, mask, o1, l1, a.at);
        ops::attention_fwd_composed(dev(), tq, tk, tv, mask, o2, l2, a.at);
        const int64_t l = ref::keys_used(d, a.opt);
        const double t = 2 * tol::attention(l), tb = 2 * tol::attention_bwd(l, d.tq);
        EXPECT_TRUE(near(o1.to_vector(), to_double(o2.to_vector()), t)) << "O";
        EXPECT_TRUE(near(l1.to_vector(), to_double(l2.to_vector()), t)) << "LSE";
        Tensor dq1 = nans(dev(), a.qs), dk1 = nans(dev(), a.ks), dv1 = nans(dev(), a.vs);
        Tensor dq2 = nans(dev(), a.qs), dk2 = nans(dev(), a.ks), dv2 = nans(dev(), a.vs);
        ops::attention_bwd(dev(), tdo, tq, tk, tv, o1, l1, mask, dq1, dk1, dv1, a.at);
        ops::attention_bwd_composed(dev(), tdo, tq, tk, tv, o1, l1, mask, dq2, dk2, dv2, a.at);
        EXPECT_TRUE(near(dq1.to_vector(), to_double(dq2.to_vector()), tb)) << "dQ";
        EXPECT_TRUE(near(dk1.to_vector(), to_double(dk2.to_vector()), tb)) << "dK";
        EXPECT_TRUE(near(dv1.to_vector(), to_double(dv2.to_vector()), tb)) << "dV";
    }
}

// A mask of the wrong shape is refused, the message naming both the mask and what it must be.
TEST_P(AttentionConformance, RefusesAMaskOfTheWrongShape) {
    XYLEM_REQUIRE_OP(XYLEM_OP_ATTENTION_FWD);
    const Shape qs{2, 2, 3, 4}, ks{2, 2, 9, 4};
    Tensor tq = upload(dev(), qs, std::vector<float>(48, 0.5f)), tk = upload(dev(), ks, std::vector<float>(144, 0.5f));
    Tensor tv = upload(dev(), ks, std::vector<float>(144, 0.5f));
    Tensor to(qs, DType::F32, dev()), tl({2, 2, 3}, DType::F32, dev());
    const xylem_attention_attrs at{0.5f, 0, 0.0f, 0, 0};
    Tensor m2({4, 9}, DType::F32, dev());
    const std::string e2 = error_of([&] { ops::attention_fwd(dev(), tq, tk, tv, &m2, to, tl, at); });
    EXPECT_TRUE(contains(e2, "[4, 9]"));
    EXPECT_TRUE(contains(e2, "[3, 9]"));
    Tensor m4({2, 3, 3, 9}, DType::F32, dev());  // 3 heads for 2
    const std::string e4 = error_of([&] { ops::attention_fwd(dev(), tq, tk, tv, &m4, to, tl, at); });
    EXPECT_TRUE(contains(e4, "[2, 3, 3, 9]"));
    EXPECT_TRUE(contains(e4, "[2, 2, 3, 9]"));
    // kv_length past the cache.
    const xylem_attention_attrs past{0.5f, 0, 0.0f, 10, 0};
    EXPECT_TRUE(contains(error_of([&] { ops::attention_fwd(dev(), tq, tk, tv, nullptr, to, tl, past); }), "kv_length"));
}

// ---- gemm_batched ----------------------------------------------------------------------------
class GemmBatchedConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(GemmBatchedConformance);

TEST_P(GemmBatchedConformance, BatchesBroadcastsAndTransposes) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GEMM_BATCHED);
    Rng rng;
    struct Size {
        Shape batch;
        int64_t m, n, k;
    };
    const std::vector<Size> sizes = {{{3}, 1, 1, 1}, {{2, 3}, 5, 7, 9}, {{4}, 33, 65, 40}, {{2}, 64, 64, 100}};
    for (const Size& z : sizes)
        for (bool ta : {false, true})
            for (bool tb : {false, true})
                for (int broadcast = 0; broadcast < 3; ++broadcast)  // none, A 2-D, B 2-D
                    for (float beta : {0.0f, 0.5f}) {
                        const bool a_batched = broadcast != 1, b_batched = broadcast != 2;
                        int64_t batch = 1;
                        for (int64_t v : z.batch) batch *= v;
                        const int64_t ar = ta ? z.k : z.m, ac = ta ? z.m : z.k, br = tb ? z.n : z.k, bc = tb ? z.k : z.n;
                        auto with = [&](Shape lead, int64_t r, int64_t c, bool batched) {
                            if (!batched) lead.clear();
                            lead.push_back(r);
                            lead.push_back(c);
                            return lead;
                        };
                        const Shape as = with(z.batch, ar, ac, a_batched), bs = with(z.batch, br, bc, b_batched);
                        const Shape cs = with(z.batch, z.m, z.n, true);
                        SCOPED_TRACE("A " + to_string(as) + (ta ? "^T" : "") + " B " + to_string(bs) + (tb ? "^T" : "") +
                                     " C " + to_string(cs) + " beta " + std::to_string(beta));
                        const auto a = rng.uniform(numel(as)), b = rng.uniform(numel(bs)), c = rng.uniform(numel(cs));
                        Tensor tA = upload(dev(), as, a), tB = upload(dev(), bs, b);
                        Tensor tC = beta == 0.0f ? nans(dev(), cs) : upload(dev(), cs, c);
                        ops::gemm_batched(dev(), ta, tb, 1.25f, tA, tB, beta, tC);
                        const auto want = ref::gemm_batched(batch, ta, tb, 1.25, to_double(a), a_batched, ar, ac,
                                                            to_double(b), b_batched, br, bc, beta, to_double(c));
                        EXPECT_TRUE(near(tC.to_vector(), want, tol::gemm(z.k)));
                    }
}

TEST_P(GemmBatchedConformance, RefusesMismatchedBatches) {
    XYLEM_REQUIRE_OP(XYLEM_OP_GEMM_BATCHED);
    Tensor a({2, 3, 4}, DType::F32, dev()), b({3, 4, 5}, DType::F32, dev()), c({2, 3, 5}, DType::F32, dev());
    const std::string e = error_of([&] { ops::gemm_batched(dev(), false, false, 1.0f, a, b, 0.0f, c); });
    EXPECT_TRUE(contains(e, "[3, 4, 5]"));
    EXPECT_TRUE(contains(e, "[2, 3, 5]"));
}

// ---- permute ---------------------------------------------------------------------------------
class PermuteConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(PermuteConformance);

TEST_P(PermuteConformance, RanksTwoToFive) {
    XYLEM_REQUIRE_OP(XYLEM_OP_PERMUTE);
    Rng rng;
    struct Case {
        Shape x;
        std::vector<int> perm;
    };
    const std::vector<Case> cases = {
            {{5, 7}, {1, 0}},
            {{1, 9}, {1, 0}},
            {{33, 65}, {1, 0}},
            {{4, 5}, {0, 1}},
            {{3, 4, 5}, {2, 0, 1}},
            {{3, 4, 5}, {1, 0, 2}},
            {{2, 3, 4, 5}, {0, 2, 1, 3}},  // [B, T, H, D] -> [B, H, T, D]: the head split
            {{2, 3, 4, 5}, {3, 2, 1, 0}},
            {{2, 5, 3, 4, 6}, {2, 0, 3, 1, 4}},  // [B, T, 3, H, D] -> [3, B, H, T, D]: Q, K, V from one projection
            {{2, 3, 1, 4, 5}, {4, 3, 2, 1, 0}},
            {{7}, {0}},
            // Y's next-to-last axis X's last (tiles on native): blocks of 2-D transposes, tile
            // remainders on both axes (the recurrent layers' token path: [T, B, G*H] -> [T, G*H, B]).
            {{3, 37, 70}, {0, 2, 1}},
            {{70, 33}, {1, 0}},
            {{4, 70, 3}, {1, 2, 0}},
            {{2, 3, 33, 40}, {1, 0, 3, 2}},
            {{5, 1, 3}, {2, 0, 1}},
    };
    for (const Case& c : cases) {
        const Shape ys = ops::permuted_shape(c.x, c.perm);
        std::string perm;
        for (int p : c.perm) perm += std::to_string(p) + " ";
        SCOPED_TRACE("X " + to_string(c.x) + " perm " + perm);
        const auto x = rng.uniform(numel(c.x));
        Tensor tx = upload(dev(), c.x, x), ty = nans(dev(), ys);
        ops::permute(dev(), tx, ty, c.perm);
        EXPECT_TRUE(near(ty.to_vector(), ref::permute(to_double(x), ref::Dims(c.x.begin(), c.x.end()), c.perm),
                         tol::kExact));
    }
}

// ---- masked_softmax --------------------------------------------------------------------------
class MaskedSoftmaxConformance : public BackendTest {};
XYLEM_INSTANTIATE_OVER_BACKENDS(MaskedSoftmaxConformance);

TEST_P(MaskedSoftmaxConformance, MasksCausalAndLse) {
    XYLEM_REQUIRE_OP(XYLEM_OP_MASKED_SOFTMAX);
    Rng rng;
    struct Case {
        Shape x;
        ref::Dims mask;
        bool causal;
    };
    const std::vector<Case> cases = {
            {{1, 1}, {}, false},
            {{5, 9}, {}, true},
            {{7, 4}, {}, true},  // Tq > L: the first rows see nothing
            {{3, 6, 33}, {6, 33}, false},
            {{2, 3, 7, 7}, {}, true},
            {{2, 3, 7, 7}, {7, 7}, true},
            {{2, 3, 5, 9}, {2, 1, 1, 9}, false},
            {{2, 3, 5, 9}, {1, 3, 5, 9}, true},
            {{2, 3, 5, 9}, {2, 3, 1, 9}, false},
            {{2, 2, 4, 200}, {2, 2, 4, 200}, false},
    };
    for (const Case& c : cases)
        for (bool with_lse : {true, false}) {
            SCOPED_TRACE("X " + to_string(c.x) + " mask " + dims_text(c.mask) + (c.causal ? " causal" : "") +
                         (with_lse ? " lse" : ""));
            const int64_t l = c.x.back(), tq = c.x[c.x.size() - 2], rows = numel(c.x) / l, batch = rows / tq;
            const int64_t heads = c.x.size() == 4 ? c.x[1] : 1;
            const auto x = rng.uniform(numel(c.x), -3.0f, 3.0f);
            std::vector<float> mask;
            Tensor tm;
            if (!c.mask.empty()) {
                const Shape ms(c.mask.begin(), c.mask.end());
                mask = rng.uniform(numel(ms), -2.0f, 2.0f);
                for (size_t e = 2; e < mask.size(); e += 5) mask[e] = -kInf;
                if (mask.size() >= static_cast<size_t>(l))  // one row hidden entirely
                    for (int64_t j = 0; j < l; ++j) mask[static_cast<size_t>(j)] = -kInf;
                tm = upload(dev(), ms, mask);
            }
            Tensor tx = upload(dev(), c.x, x), ty = nans(dev(), c.x), tl = nans(dev(), {rows});
            ops::masked_softmax(dev(), tx, c.mask.empty() ? nullptr : &tm, ty, with_lse ? &tl : nullptr, 0.75f, c.causal);
            const auto want =
                    ref::masked_softmax(to_double(x), batch, heads, tq, l, to_double(mask), c.mask, 0.75, c.causal);
            EXPECT_TRUE(near(ty.to_vector(), want.y, tol::kMaskedSoftmax)) << "Y";
            if (with_lse) {
                EXPECT_TRUE(near(tl.to_vector(), want.lse, tol::kMaskedSoftmax)) << "LSE";
            }
        }
}

}  // namespace
}  // namespace xylem::test
