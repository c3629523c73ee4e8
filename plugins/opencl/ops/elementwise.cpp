// Elementwise ops: FILL, COPY, AXPBY, MUL, ACT_FWD, ACT_BWD, DROPOUT_FWD (kernels/elementwise.cl),
// and the bias + activation and scaling passes other families share.
#include "opencl.h"

namespace xylem::opencl {

namespace {
constexpr Family kFam = Family::Elementwise;
}

void bias_activate(xylem_stream_s& s, int act, const Tensor* b, cl_mem y, int32_t y_off, int32_t rows, int32_t cols) {
    if (!b && act == XYLEM_ACT_NONE) return;
    const cl_int has_bias = b ? 1 : 0;
    Kernel(s, kFam, "bias_act_rows")
        .arg(act).arg(has_bias).arg(b ? b->mem : y).arg(b ? b->off : 0).arg(y).arg(y_off).arg(rows).arg(cols)
        .run(chunks16(static_cast<int64_t>(rows) * cols));
}

void scale(xylem_stream_s& s, float factor, cl_mem y, int32_t y_off, int32_t n) {
    if (factor == 1.0f) return;
    Kernel(s, kFam, "scale_f32").arg(factor).arg(y).arg(y_off).arg(n).run(n);
}

void op_fill(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 0, 0, 1);
    const float value = a.attrs<xylem_fill_attrs>().value;
    if (desc.outputs[0].dtype == XYLEM_I32) {
        const Tensor out = a.out(0, "out", XYLEM_I32);
        if (!(value >= -2147483648.0f && value < 2147483648.0f)) a.fail("value %g does not fit an i32", value);
        const cl_int v = static_cast<cl_int>(value);
        Kernel(s, kFam, "fill_i32").arg(out.mem).arg(out.off).arg(out.numel).arg(v).run(out.numel);
        return;
    }
    const Tensor out = a.out(0, "out");
    Kernel(s, kFam, "fill_f32").arg(out.mem).arg(out.off).arg(out.numel).arg(value).run(out.numel);
}

void op_copy(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 1);
    const xylem_dtype dtype = desc.inputs[0].dtype == XYLEM_I32 ? XYLEM_I32 : XYLEM_F32;
    const Tensor in = a.in(0, "in", dtype), out = a.out(0, "out", dtype);
    a.same_numel(in, "in", out, "out");
    if (in.mem == out.mem && in.off == out.off) return;
    if (overlap(in, out)) a.fail("in and out overlap without being the same range");
    Kernel(s, kFam, "copy_words").arg(in.mem).arg(in.off).arg(out.mem).arg(out.off).arg(in.numel).run(in.numel);
}

void op_axpby(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 2, 1);
    const auto at = a.attrs<xylem_axpby_attrs>();
    const Tensor ta = a.in(0, "a"), out = a.out(0, "out");
    a.same_numel(ta, "a", out, "out");
    if (a.n_inputs() == 2) {
        const Tensor tb = a.in(1, "b");
        a.same_numel(ta, "a", tb, "b");
        Kernel(s, kFam, "axpby").arg(at.alpha).arg(ta.mem).arg(ta.off).arg(at.beta).arg(tb.mem).arg(tb.off)
            .arg(out.mem).arg(out.off).arg(out.numel).run(out.numel);
        return;
    }
    Kernel(s, kFam, "axpby_inplace").arg(at.alpha).arg(ta.mem).arg(ta.off).arg(at.beta).arg(out.mem).arg(out.off)
        .arg(out.numel).run(out.numel);
}

void op_mul(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const Tensor ta = a.in(0, "a"), tb = a.in(1, "b"), out = a.out(0, "out");
    a.same_numel(ta, "a", tb, "b");
    a.same_numel(ta, "a", out, "out");
    Kernel(s, kFam, "mul").arg(ta.mem).arg(ta.off).arg(tb.mem).arg(tb.off).arg(out.mem).arg(out.off).arg(out.numel)
        .run(out.numel);
}

// out = alpha*a + beta*b with b broadcast over rows (a row vector) or columns (a column vector).
void op_add(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const auto at = a.attrs<xylem_add_attrs>();
    const Tensor ta = a.in(0, "a"), tb = a.in(1, "b"), out = a.out(0, "out");
    const plugin_kit::AddShape sh = plugin_kit::add_shape(a, ta, tb, out);
    if (sh.b != plugin_kit::Broadcast::elementwise && overlap(out, tb)) a.fail("out overlaps the broadcast b");
    const cl_int mode = static_cast<cl_int>(sh.b), cols = static_cast<cl_int>(sh.cols);
    Kernel(s, kFam, "add_broadcast").arg(at.alpha).arg(ta.mem).arg(ta.off).arg(at.beta).arg(tb.mem).arg(tb.off)
        .arg(mode).arg(cols).arg(out.mem).arg(out.off).arg(out.numel).run(out.numel);
}

void op_act_fwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 1);
    const cl_int act = a.check_act_op_activation(a.attrs<xylem_act_attrs>().activation);
    const Tensor x = a.in(0, "x"), y = a.out(0, "y");
    a.same_numel(x, "x", y, "y");
    Kernel(s, kFam, "act_fwd").arg(act).arg(x.mem).arg(x.off).arg(y.mem).arg(y.off).arg(y.numel).run(chunks16(y.numel));
}

void op_act_bwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 2, 2, 1);
    const cl_int act = a.check_act_op_activation(a.attrs<xylem_act_attrs>().activation);
    // The second input is y, except for the GELUs, whose derivative needs x (ops.h).
    const bool from_x = act == XYLEM_ACT_GELU || act == XYLEM_ACT_GELU_TANH;
    const char* v_name = from_x ? "x" : "y";
    const Tensor dy = a.in(0, "dy"), v = a.in(1, v_name), dx = a.out(0, "dx");
    a.same_numel(dy, "dy", v, v_name);
    a.same_numel(dy, "dy", dx, "dx");
    Kernel(s, kFam, "act_bwd").arg(act).arg(dy.mem).arg(dy.off).arg(v.mem).arg(v.off).arg(dx.mem).arg(dx.off)
        .arg(dx.numel).run(chunks16(dx.numel));
}

void op_dropout_fwd(const xylem_op_desc& desc, xylem_stream_s& s) {
    OpArgs a(desc, 1, 1, 2);
    const auto at = a.attrs<xylem_dropout_attrs>();
    const Tensor x = a.in(0, "x"), y = a.out(0, "y"), mask = a.out(1, "mask");
    a.same_numel(x, "x", y, "y");
    a.same_numel(x, "x", mask, "mask");
    if (!(at.p >= 0.0f && at.p < 1.0f)) a.fail("p = %g must be in [0, 1)", at.p);
    const cl_ulong seed = at.seed;
    Kernel(s, kFam, "dropout_fwd").arg(seed).arg(at.p).arg(x.mem).arg(x.off).arg(y.mem).arg(y.off).arg(mask.mem)
        .arg(mask.off).arg(x.numel).run(x.numel);
}

}  // namespace xylem::opencl
