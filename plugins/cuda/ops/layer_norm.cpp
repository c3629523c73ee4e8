// LAYER_NORM_FWD / LAYER_NORM_BWD (ABI 1.7): the kit's rule and the native plugin's operand checks,
// then the kernels of kernels/layer_norm.cu (statistics in double; dgamma/dbeta from fixed chunks of
// rows added in order, through scratch: deterministic).
#include "cuda_plugin.h"
#include "kernels/kernels.h"
#include "xylem/plugin_kit/shapes_transformer.h"

namespace xylem::cuda {

namespace {
using ll = long long;
}

void op_layer_norm_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 3, 3);
    const auto at = a.attrs<xylem_layer_norm_attrs>();
    const Tensor tx = a.in(0, "X"), tg = a.in(1, "gamma"), ty = a.out(0, "Y"), tm = a.out(1, "mean"),
                 tr = a.out(2, "rstd");
    const Tensor tb = a.n_inputs() == 3 ? a.in(2, "beta") : Tensor{};
    const Tensor* beta = a.n_inputs() == 3 ? &tb : nullptr;
    const plugin_kit::LayerNormShape ls = plugin_kit::layer_norm_shape(a, at, tx, tg, beta, tm, tr);
    plugin_kit::same_shape(a, ty, "Y", tx, "X");
    if (tx.data != ty.data && overlap(tx, ty)) a.fail("Y partly overlaps X (in place is fine)");
    if (overlap(tm, tr) || overlap(tm, ty) || overlap(tr, ty) || overlap(tm, tx) || overlap(tr, tx))
        a.fail("mean and rstd must not overlap each other, X or Y");
    kernels::layer_norm_fwd(tx.f32(), tg.f32(), beta ? tb.f32() : nullptr, ty.f32(), tm.f32(), tr.f32(), ls.rows, ls.d,
                            at.eps, s.stream_);
    a.check_launch();
}

void op_layer_norm_bwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    const bool has_dbeta = desc.n_outputs == 3;
    OpArgs a(desc, 5, 5, has_dbeta ? 3 : 2);
    const auto at = a.attrs<xylem_layer_norm_attrs>();
    const Tensor tdy = a.in(0, "dY"), tx = a.in(1, "X"), tg = a.in(2, "gamma"), tm = a.in(3, "mean"),
                 tr = a.in(4, "rstd");
    const Tensor tdx = a.out(0, "dX"), tdg = a.out(1, "dgamma");
    const Tensor tdb = has_dbeta ? a.out(2, "dbeta") : Tensor{};
    const plugin_kit::LayerNormShape ls =
        plugin_kit::layer_norm_shape(a, at, tx, tg, static_cast<const Tensor*>(nullptr), tm, tr);
    plugin_kit::same_shape(a, tdy, "dY", tx, "X");
    plugin_kit::same_shape(a, tdx, "dX", tx, "X");
    if (tdg.numel != ls.d) a.fail("dgamma holds %lld elements for D = %lld", ll(tdg.numel), ll(ls.d));
    if (has_dbeta && tdb.numel != ls.d) a.fail("dbeta holds %lld elements for D = %lld", ll(tdb.numel), ll(ls.d));
    if (overlap(tdx, tx) || (tdx.data != tdy.data && overlap(tdx, tdy)) || overlap(tdg, tdx) || overlap(tdg, tdy) ||
        (has_dbeta && (overlap(tdb, tdx) || overlap(tdb, tdg) || overlap(tdb, tdy))))
        a.fail("the outputs overlap each other or the inputs (dX may be dY)");
    const int64_t partials = kernels::layer_norm_partials(ls.rows, ls.d, has_dbeta);
    kernels::layer_norm_bwd(tdy.f32(), tx.f32(), tg.f32(), tm.f32(), tr.f32(), tdx.f32(), tdg.f32(),
                            has_dbeta ? tdb.f32() : nullptr, ls.rows, ls.d, at.beta,
                            s.scratch_.alloc<double>(partials > 0 ? partials : 1), s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
