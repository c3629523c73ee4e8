// Losses: XENT (fused log-softmax + NLL), NLL and MSE. Forward writes the device loss scalar
// (loss = acc*loss + scale*sum), so summing over a run never reads back to the host. Labels are
// range-checked by the kernels (NaN rows + a stream flag that stream_sync reports), not here:
// checking them on the host would mean waiting for the device.
#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

void op_xent_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto attrs = a.attrs<xylem_loss_attrs>();
    const Tensor tx = a.in(0, "logits"), tl = a.in(1, "labels", XYLEM_I32), tloss = a.out(0, "loss");
    a.check_classification(tx, tl);
    a.check_scalar(tloss, "loss");
    kernels::xent_fwd(tx.f32(), tl.i32(), tloss.f32(), tx.dims[0], tx.dims[1], attrs.scale, attrs.acc,
                      s.flag_word(desc.op), s.flag_bit(desc.op), s.stream_);
    a.check_launch();
}

void op_xent_bwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const float scale = a.attrs<xylem_loss_attrs>().scale;
    const Tensor tx = a.in(0, "logits"), tl = a.in(1, "labels", XYLEM_I32), tdx = a.out(0, "dlogits");
    a.check_classification(tx, tl);
    a.same_numel(tx, "logits", tdx, "dlogits");
    kernels::xent_bwd(tx.f32(), tl.i32(), tdx.f32(), tx.dims[0], tx.dims[1], scale, s.flag_word(desc.op),
                      s.flag_bit(desc.op), s.stream_);
    a.check_launch();
}

void op_nll_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto attrs = a.attrs<xylem_loss_attrs>();
    const Tensor tlogp = a.in(0, "logp"), tl = a.in(1, "labels", XYLEM_I32), tloss = a.out(0, "loss");
    a.check_classification(tlogp, tl);
    a.check_scalar(tloss, "loss");
    kernels::nll_fwd(tlogp.f32(), tl.i32(), tloss.f32(), tlogp.dims[0], tlogp.dims[1], attrs.scale, attrs.acc,
                     s.flag_word(desc.op), s.flag_bit(desc.op), s.stream_);
    a.check_launch();
}

void op_nll_bwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const float scale = a.attrs<xylem_loss_attrs>().scale;
    const Tensor tlogp = a.in(0, "logp"), tl = a.in(1, "labels", XYLEM_I32), tdx = a.out(0, "dlogp");
    a.check_classification(tlogp, tl);
    a.same_numel(tlogp, "logp", tdx, "dlogp");
    kernels::nll_bwd(tl.i32(), tdx.f32(), tlogp.dims[0], tlogp.dims[1], scale, s.flag_word(desc.op),
                     s.flag_bit(desc.op), s.stream_);
    a.check_launch();
}

void op_mse_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto attrs = a.attrs<xylem_loss_attrs>();
    const Tensor tp = a.in(0, "pred"), tt = a.in(1, "target"), tloss = a.out(0, "loss");
    a.same_numel(tp, "pred", tt, "target");
    a.check_scalar(tloss, "loss");
    double* partials = s.scratch_.alloc<double>(kernels::mse_blocks(tp.numel));
    kernels::mse_fwd(tp.f32(), tt.f32(), tloss.f32(), tp.numel, attrs.scale, attrs.acc, partials, s.stream_);
    a.check_launch();
}

void op_mse_bwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const float scale = a.attrs<xylem_loss_attrs>().scale;
    const Tensor tp = a.in(0, "pred"), tt = a.in(1, "target"), tdp = a.out(0, "dpred");
    a.same_numel(tp, "pred", tt, "target");
    a.same_numel(tp, "pred", tdp, "dpred");
    kernels::mse_bwd(tp.f32(), tt.f32(), tdp.f32(), tp.numel, scale, s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
