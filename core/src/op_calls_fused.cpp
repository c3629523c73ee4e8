// The typed call of fused_elementwise: the kit's rule (plugin_kit/fused.h) on the core's shapes,
// then one descriptor with every operand.
#include <vector>

#include "op_call_util.h"
#include "xylem/op_calls.h"
#include "xylem/plugin_kit/fused.h"

namespace xylem::ops {

void fused_elementwise(Device& dev, const xylem_fused_attrs& attrs, const std::vector<const Tensor*>& inputs,
                       const std::vector<Tensor*>& outputs) {
    const uint32_t op = XYLEM_OP_FUSED_ELEMENTWISE;
    using detail::View;
    std::vector<View> in_views, out_views;
    for (const Tensor* t : inputs) {
        if (t->dtype() != DType::F32) detail::shape_error(op, "inputs must be f32");
        in_views.emplace_back(op, t->shape());
    }
    for (const Tensor* t : outputs) {
        if (t->dtype() != DType::F32) detail::shape_error(op, "outputs must be f32");
        out_views.emplace_back(op, t->shape());
    }
    if (outputs.empty()) detail::shape_error(op, "needs at least one output");
    plugin_kit::fused_check(detail::Rule{op}, attrs, in_views.data(), static_cast<uint32_t>(in_views.size()),
                            out_views.data(), static_cast<uint32_t>(out_views.size()));
    std::vector<xylem_tensor_arg> in_args, out_args;
    for (const Tensor* t : inputs) in_args.push_back(t->read(dev));
    for (Tensor* t : outputs) {
        bool also_input = false;
        for (const Tensor* i : inputs) also_input = also_input || i == t;
        out_args.push_back(also_input ? t->read_write(dev) : t->write(dev));
    }
    const xylem_op_desc d{op, static_cast<uint32_t>(in_args.size()), static_cast<uint32_t>(out_args.size()),
                          static_cast<uint32_t>(sizeof attrs), in_args.data(), out_args.data(), &attrs};
    dev.run(d);
}

}  // namespace xylem::ops
