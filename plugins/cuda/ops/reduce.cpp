// Reductions whose result stays in a device buffer: BIAS_GRAD, ACCURACY and REDUCE.
#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

void op_bias_grad(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 1);
    const float beta = a.attrs<xylem_bias_grad_attrs>().beta;
    const Tensor tdy = a.in(0, "dy"), tdb = a.out(0, "db");
    const plugin_kit::BiasGradShape b = plugin_kit::bias_grad_shape(a, tdy, tdb);
    kernels::bias_grad(tdy.f32(), tdb.f32(), b.n, b.c, b.inner, beta, s.stream_);
    a.check_launch();
}

// A label outside [0, C) counts as wrong and flags the stream (stream_sync reports it).
void op_accuracy(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const Tensor tlogits = a.in(0, "logits"), tlabels = a.in(1, "labels", XYLEM_I32), tcorrect = a.out(0, "correct");
    a.check_classification(tlogits, tlabels);
    a.check_scalar(tcorrect, "correct");
    kernels::accuracy(tlogits.f32(), tlabels.i32(), tcorrect.f32(), tlogits.dims[0], tlogits.dims[1],
                      s.flag_word(desc.op), s.flag_bit(desc.op), s.stream_);
    a.check_launch();
}

// Deterministic: the kernels and their slices depend on the shape alone (kernels/reduce.cu).
void op_reduce(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 1);
    const auto at = a.attrs<xylem_reduce_attrs>();
    const Tensor tx = a.in(0, "x"), tout = a.out(0, "out");
    const auto r = plugin_kit::reduce_shape(a, at, tx, tout);
    if (overlap(tout, tx)) a.fail("out overlaps x");
    const kernels::ReduceGeom g{r.outputs(), r.n, r.inner, at.mode, at.beta};
    const int64_t partials = kernels::reduce_partials(g);
    kernels::reduce(tx.f32(), tout.f32(), g, partials ? s.scratch_.alloc<double>(partials) : nullptr, s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
