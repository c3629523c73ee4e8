// Elementwise ops: FILL, COPY, AXPBY, MUL, ACT_FWD, ACT_BWD, DROPOUT_FWD (validation as on the CPU).
#include "cuda_plugin.h"
#include "kernels/kernels.h"

namespace xylem::cuda {

namespace k = kernels;

void op_fill(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 0, 0, 1);
    const float value = a.attrs<xylem_fill_attrs>().value;
    uint32_t bits;
    Tensor out{};
    if (desc.outputs[0].dtype == XYLEM_I32) {
        out = a.out(0, "out", XYLEM_I32);
        if (!(value >= -2147483648.0f && value < 2147483648.0f)) a.fail("value %g does not fit an i32", value);
        const int32_t v = static_cast<int32_t>(value);
        std::memcpy(&bits, &v, 4);
    } else {
        out = a.out(0, "out");
        std::memcpy(&bits, &value, 4);
    }
    k::fill_u32(static_cast<uint32_t*>(out.data), out.numel, bits, s.stream_);
    a.check_launch();
}

void op_copy(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 1);
    const xylem_dtype dtype = desc.inputs[0].dtype == XYLEM_I32 ? XYLEM_I32 : XYLEM_F32;
    const Tensor in = a.in(0, "in", dtype), out = a.out(0, "out", dtype);
    a.same_numel(in, "in", out, "out");
    if (in.data == out.data || !in.numel) return;
    const size_t bytes = static_cast<size_t>(in.numel) * 4;
    const void* from = in.data;
    if (overlap(in, out)) {  // memmove semantics, as on the CPU: go through scratch
        void* tmp = s.scratch_.alloc<uint32_t>(in.numel);
        a.check_cuda(cudaMemcpyAsync(tmp, from, bytes, cudaMemcpyDeviceToDevice, s.stream_), "cudaMemcpyAsync");
        from = tmp;
    }
    a.check_cuda(cudaMemcpyAsync(out.data, from, bytes, cudaMemcpyDeviceToDevice, s.stream_), "cudaMemcpyAsync");
}

void op_axpby(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 2, 1);
    const auto attrs = a.attrs<xylem_axpby_attrs>();
    const Tensor ta = a.in(0, "a"), tout = a.out(0, "out");
    a.same_numel(ta, "a", tout, "out");
    const float* b = nullptr;
    if (a.n_inputs() == 2) {
        const Tensor tb = a.in(1, "b");
        a.same_numel(ta, "a", tb, "b");
        b = tb.f32();
    }
    k::axpby(ta.f32(), b, tout.f32(), ta.numel, attrs.alpha, attrs.beta, s.stream_);
    a.check_launch();
}

void op_mul(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const Tensor ta = a.in(0, "a"), tb = a.in(1, "b"), tout = a.out(0, "out");
    a.same_numel(ta, "a", tb, "b");
    a.same_numel(ta, "a", tout, "out");
    k::mul(ta.f32(), tb.f32(), tout.f32(), ta.numel, s.stream_);
    a.check_launch();
}

// add (ABI 1.4): b elementwise, a row vector or a column vector (plugin_kit::add_shape, the rule every
// plugin shares); out may be a, or b when b is elementwise; a broadcast b must not overlap out.
void op_add(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const auto at = a.attrs<xylem_add_attrs>();
    const Tensor ta = a.in(0, "a"), tb = a.in(1, "b"), tout = a.out(0, "out");
    const plugin_kit::AddShape sh = plugin_kit::add_shape(a, ta, tb, tout);
    if (sh.b != plugin_kit::Broadcast::elementwise && overlap(tout, tb)) a.fail("out overlaps the broadcast b");
    k::add(ta.f32(), tb.f32(), tout.f32(), sh.rows, sh.cols, static_cast<int>(sh.b), at.alpha, at.beta, s.stream_);
    a.check_launch();
}

// act_fwd and act_bwd take the GELUs too (ABI 1.7); linear_fwd and conv2d_fwd do not fuse them.
void op_act_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 1);
    const int act = a.check_act_op_activation(a.attrs<xylem_act_attrs>().activation);
    const Tensor x = a.in(0, "x"), y = a.out(0, "y");
    a.same_numel(x, "x", y, "y");
    k::act_fwd(act, x.f32(), y.f32(), x.numel, s.stream_);
    a.check_launch();
}

// The second input is y = act(x), or x itself for the GELUs.
void op_act_bwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 2, 2, 1);
    const int act = a.check_act_op_activation(a.attrs<xylem_act_attrs>().activation);
    const bool gelu = act == XYLEM_ACT_GELU || act == XYLEM_ACT_GELU_TANH;
    const Tensor tdy = a.in(0, "dy"), ty = a.in(1, gelu ? "x" : "y"), tdx = a.out(0, "dx");
    a.same_numel(tdy, "dy", ty, "y");
    a.same_numel(tdy, "dy", tdx, "dx");
    k::act_bwd(act, tdy.f32(), ty.f32(), tdx.f32(), tdy.numel, s.stream_);
    a.check_launch();
}

void op_dropout_fwd(const xylem_op_desc& desc, xylem_stream_s& s, xylem_framework_s&) {
    OpArgs a(desc, 1, 1, 2);
    const auto attrs = a.attrs<xylem_dropout_attrs>();
    const Tensor tx = a.in(0, "x"), ty = a.out(0, "y"), tmask = a.out(1, "mask");
    a.same_numel(tx, "x", ty, "y");
    a.same_numel(tx, "x", tmask, "mask");
    if (!(attrs.p >= 0.0f && attrs.p < 1.0f)) a.fail("p = %g must be in [0, 1)", attrs.p);
    k::dropout(tx.f32(), ty.f32(), tmask.f32(), tx.numel, attrs.p, attrs.seed, s.stream_);
    a.check_launch();
}

}  // namespace xylem::cuda
