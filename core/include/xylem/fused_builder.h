// FusedBuilder: writes a fused_elementwise program (ops.h, ABI 1.5) from expressions over virtual
// registers, then packs it: outputs moved after every input read (the aliasing rule of
// plugin_kit/fused.h) and registers reused once their last reader has run (so long chains fit in
// XYLEM_FUSED_MAX_REGS). The fusion pass (core/src/fusion.cpp), the tests and benchmarks use it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xylem/ops.h"

namespace xylem {

class FusedBuilder {
public:
    using Value = uint32_t;  // a virtual register

    Value input(uint32_t index);  // input `index` at this element
    Value param(float value);     // a value bound at each run: gets the next params slot
    Value constant(float value);
    Value apply(xylem_fused_opcode op, Value a, Value b = 0, Value c = 0);
    void output(uint32_t index, Value v);

    // Instructions, params, inputs and outputs so far (before packing).
    size_t instructions() const { return code_.size() + outputs_.size(); }
    uint32_t params() const { return static_cast<uint32_t>(params_.size()); }
    // Sets every params slot's value again (a run binds new learning rates etc.; same order).
    void set_params(const std::vector<float>& values) { params_ = values; }

    // The packed program with input modes; throws Error when it exceeds the ABI's limits. `modes`
    // has one entry per input index.
    xylem_fused_attrs finish(const std::vector<uint8_t>& modes) const;
    // True when finish() would fit the ABI's limits (instructions, registers, params).
    bool fits() const;
    // "add(mul(in0, in1), p0)"-like text of the program for messages and profiles.
    std::string describe() const;

private:
    struct Instr {
        uint8_t op;
        uint32_t dst, a, b, c;
        float imm;
    };
    std::vector<Instr> code_;                            // everything but OUTPUT, in order
    std::vector<std::pair<uint32_t, Value>> outputs_;    // (output index, value)
    std::vector<float> params_;
    uint32_t next_ = 0;
};

}  // namespace xylem
