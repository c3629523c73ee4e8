// Plugin kit: OpArgs, the operand and attribute checks every op descriptor needs.
// Header-only C++17. Each plugin describes itself with a traits type:
//
//   struct Plugin {
//       static constexpr const char* name = "mine";        // message prefix: "mine: gemm: ..."
//       static constexpr size_t error_capacity = 512;      // bytes of the last_error() message
//       static constexpr const char* no_memory = "out of host memory";  // text for bad_alloc
//       static constexpr bool index32 = false;             // reject operands past INT_MAX elements
//       using Tensor = MyTensor;                           // needs ndim, dims, numel
//       static uint64_t buffer_bytes(xylem_buffer_t b);    // the buffer's size in bytes
//       static Tensor tensor(const xylem_tensor_arg& arg, uint64_t numel);  // arg already checked
//   };
//   using OpArgs = xylem::plugin_kit::OpArgs<Plugin>;
//
// Every failure records "<name>: <op>: <message>" and throws OpError (errors.h).
#pragma once

#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstring>

#include "xylem/plugin_kit/errors.h"

namespace xylem::plugin_kit {

inline const char* dtype_name(uint32_t dtype) {
    return dtype == XYLEM_F32 ? "f32" : dtype == XYLEM_I32 ? "i32" : "unknown dtype";
}

template <class Plugin>
class OpArgs {
public:
    using Tensor = typename Plugin::Tensor;

    // Checks min_in <= n_inputs <= max_in, n_outputs == n_out and the operand arrays.
    OpArgs(const xylem_op_desc& desc, uint32_t min_in, uint32_t max_in, uint32_t n_out) : desc_(desc) {
        if (desc.n_inputs < min_in || desc.n_inputs > max_in) {
            if (min_in == max_in) fail("expects %u input(s), got %u", min_in, desc.n_inputs);
            fail("expects %u to %u inputs, got %u", min_in, max_in, desc.n_inputs);
        }
        if (desc.n_outputs != n_out) fail("expects %u output(s), got %u", n_out, desc.n_outputs);
        if ((desc.n_inputs && !desc.inputs) || (desc.n_outputs && !desc.outputs)) fail("operand array is NULL");
    }

    const xylem_op_desc& desc() const { return desc_; }
    uint32_t op() const { return desc_.op; }
    uint32_t n_inputs() const { return desc_.n_inputs; }

    // Operand i, checked: present, dtype, dims, and its element range inside its buffer.
    Tensor in(uint32_t i, const char* name, xylem_dtype dtype = XYLEM_F32) const {
        if (i >= desc_.n_inputs) fail("input %u (%s) is missing", i, name);
        return operand(desc_.inputs[i], "input", i, name, dtype);
    }
    Tensor out(uint32_t i, const char* name, xylem_dtype dtype = XYLEM_F32) const {
        if (i >= desc_.n_outputs) fail("output %u (%s) is missing", i, name);
        return operand(desc_.outputs[i], "output", i, name, dtype);
    }

    template <class Attrs>
    Attrs attrs() const {
        if (!desc_.attrs || desc_.attrs_size < sizeof(Attrs))
            fail("attrs_size %u is smaller than the %u-byte attribute struct", desc_.attrs ? desc_.attrs_size : 0,
                 static_cast<uint32_t>(sizeof(Attrs)));
        Attrs a;
        std::memcpy(&a, desc_.attrs, sizeof a);  // the caller's pointer need not be aligned
        return a;
    }

    template <class A, class B>
    void same_numel(const A& a, const char* a_name, const B& b, const char* b_name) const {
        if (a.numel != b.numel)
            fail("%s has %lld elements but %s has %lld", a_name, static_cast<long long>(a.numel), b_name,
                 static_cast<long long>(b.numel));
    }
    template <class T>
    void check_scalar(const T& t, const char* name) const {
        if (t.numel != 1) fail("%s must hold 1 element, got %lld", name, static_cast<long long>(t.numel));
    }
    // logits [N,C] (C >= 1 when N > 0) and labels [N]. Shapes only: label values are the
    // plugin's to check (on the host, or in the kernels without waiting for the device).
    template <class T>
    void check_classification(const T& logits, const T& labels) const {
        if (logits.ndim != 2) fail("expects 2-D logits [N,C], got %u dims", logits.ndim);
        const int64_t n = logits.dims[0], c = logits.dims[1];
        if (c < 1 && n > 0) fail("logits have 0 classes");
        if (labels.numel != n)
            fail("labels hold %lld elements for %lld rows", static_cast<long long>(labels.numel),
                 static_cast<long long>(n));
    }
    // An activation a linear_fwd or conv2d_fwd fuses: one whose gradient comes from the output
    // (none, relu, sigmoid, tanh, relu6; not GELU).
    int check_activation(int32_t act) const {
        if (act == XYLEM_ACT_GELU || act == XYLEM_ACT_GELU_TANH)
            fail("activation %d (GELU) is not fused into this op: its gradient needs the input; run act_fwd", act);
        return check_act_op_activation(act);
    }
    // An activation act_fwd and act_bwd take: also the GELUs (ABI 1.7), whose act_bwd reads x, not y.
    int check_act_op_activation(int32_t act) const {
        if (act < XYLEM_ACT_NONE || act > XYLEM_ACT_RELU6) fail("unknown activation %d", act);
        return act;
    }

    [[noreturn]] __attribute__((format(printf, 2, 3))) void fail(const char* fmt, ...) const {
        va_list args;
        va_start(args, fmt);
        const xylem_status status = vset_op_error<Plugin>(XYLEM_E_INVALID, desc_.op, fmt, args);
        va_end(args);
        throw OpError{status};
    }

private:
    Tensor operand(const xylem_tensor_arg& arg, const char* kind, uint32_t i, const char* name,
                   xylem_dtype dtype) const {
        if (!arg.buffer) fail("%s %u (%s) has no buffer", kind, i, name);
        if (arg.dtype != static_cast<uint32_t>(dtype))
            fail("%s %u (%s) must be %s, got %s", kind, i, name, dtype_name(dtype), dtype_name(arg.dtype));
        if (arg.ndim > XYLEM_MAX_DIMS)
            fail("%s %u (%s) has %u dims (max %d)", kind, i, name, arg.ndim, XYLEM_MAX_DIMS);
        const uint64_t capacity = Plugin::buffer_bytes(arg.buffer) / 4;  // both dtypes are 4 bytes
        uint64_t numel = 1;
        for (uint32_t d = 0; d < arg.ndim; ++d) {
            if (arg.dims[d] < 0) fail("%s %u (%s) has negative dim %u", kind, i, name, d);
            const uint64_t size = static_cast<uint64_t>(arg.dims[d]);
            if (size && numel > capacity / size) numel = capacity + 1;  // saturate: surely out of range
            else numel *= size;
        }
        if (arg.offset > capacity || numel > capacity - arg.offset)
            fail("%s %u (%s) reads past its buffer: offset %llu + %llu elements > %llu", kind, i, name,
                 static_cast<unsigned long long>(arg.offset), static_cast<unsigned long long>(numel),
                 static_cast<unsigned long long>(capacity));
        if constexpr (Plugin::index32) {
            if (arg.offset + numel > static_cast<uint64_t>(INT_MAX))
                fail("%s %u (%s) spans %llu elements; this plugin's kernels index with 32-bit ints", kind, i, name,
                     static_cast<unsigned long long>(arg.offset + numel));
        }
        return Plugin::tensor(arg, numel);
    }

    const xylem_op_desc& desc_;
};

}  // namespace xylem::plugin_kit
