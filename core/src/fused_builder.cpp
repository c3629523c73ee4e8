// FusedBuilder: virtual registers in, a packed fused_elementwise program out.
#include "xylem/fused_builder.h"

#include <algorithm>

#include "xylem/error.h"
#include "xylem/plugin_kit/fused.h"

namespace xylem {

FusedBuilder::Value FusedBuilder::input(uint32_t index) {
    code_.push_back({XYLEM_FUSED_INPUT, next_, index, 0, 0, 0.0f});
    return next_++;
}

FusedBuilder::Value FusedBuilder::param(float value) {
    code_.push_back({XYLEM_FUSED_PARAM, next_, static_cast<uint32_t>(params_.size()), 0, 0, 0.0f});
    params_.push_back(value);
    return next_++;
}

FusedBuilder::Value FusedBuilder::constant(float value) {
    code_.push_back({XYLEM_FUSED_CONST, next_, 0, 0, 0, value});
    return next_++;
}

FusedBuilder::Value FusedBuilder::apply(xylem_fused_opcode op, Value a, Value b, Value c) {
    const int arity = plugin_kit::fused_opcode_info(op).arity;
    if (arity < 1 || op == XYLEM_FUSED_OUTPUT) throw Error("FusedBuilder::apply: opcode " + std::to_string(op) + " is not arithmetic");
    const Value args[3] = {a, b, c};
    for (int k = 0; k < arity; ++k)
        if (args[k] >= next_) throw Error("FusedBuilder::apply: value " + std::to_string(args[k]) + " is not defined yet");
    code_.push_back({static_cast<uint8_t>(op), next_, a, arity > 1 ? b : 0, arity > 2 ? c : 0, 0.0f});
    return next_++;
}

void FusedBuilder::output(uint32_t index, Value v) {
    if (v >= next_) throw Error("FusedBuilder::output: value " + std::to_string(v) + " is not defined yet");
    for (auto& o : outputs_)
        if (o.first == index) {
            o.second = v;  // the last value stored to an output wins
            return;
        }
    outputs_.emplace_back(index, v);
}

// Whether finish() succeeds: packing is cheap (one pass), so fits() simply tries it.
bool FusedBuilder::fits() const {
    if (outputs_.empty() || code_.size() + outputs_.size() > XYLEM_FUSED_MAX_INSTRS ||
        params_.size() > XYLEM_FUSED_MAX_PARAMS || outputs_.size() > XYLEM_FUSED_MAX_OUTPUTS)
        return false;
    try {
        finish({});
        return true;
    } catch (const Error&) {
        return false;
    }
}

xylem_fused_attrs FusedBuilder::finish(const std::vector<uint8_t>& modes) const {
    if (outputs_.empty()) throw Error("fused program has no outputs");
    if (code_.size() + outputs_.size() > XYLEM_FUSED_MAX_INSTRS)
        throw Error("fused program has " + std::to_string(code_.size() + outputs_.size()) + " instructions (at most " +
                    std::to_string(XYLEM_FUSED_MAX_INSTRS) + ")");
    if (params_.size() > XYLEM_FUSED_MAX_PARAMS)
        throw Error("fused program has " + std::to_string(params_.size()) + " params (at most " +
                    std::to_string(XYLEM_FUSED_MAX_PARAMS) + ")");
    if (outputs_.size() > XYLEM_FUSED_MAX_OUTPUTS)
        throw Error("fused program has " + std::to_string(outputs_.size()) + " outputs (at most " +
                    std::to_string(XYLEM_FUSED_MAX_OUTPUTS) + ")");
    if (modes.size() > XYLEM_FUSED_MAX_INPUTS)
        throw Error("fused program has " + std::to_string(modes.size()) + " inputs (at most " +
                    std::to_string(XYLEM_FUSED_MAX_INPUTS) + ")");
    // Last reader of each virtual register (outputs read at the end).
    std::vector<size_t> last(next_, 0);
    for (size_t i = 0; i < code_.size(); ++i) {
        const Instr& in = code_[i];
        last[in.dst] = std::max(last[in.dst], i);
        const int arity = plugin_kit::fused_opcode_info(in.op).arity;
        const uint32_t args[3] = {in.a, in.b, in.c};
        for (int k = 0; k < arity; ++k) last[args[k]] = std::max(last[args[k]], i);
    }
    for (const auto& o : outputs_) last[o.second] = code_.size();

    xylem_fused_attrs at{};
    at.version = XYLEM_FUSED_VERSION;
    at.n_params = static_cast<uint32_t>(params_.size());
    std::copy(params_.begin(), params_.end(), at.params);
    std::copy(modes.begin(), modes.end(), at.input_modes);
    std::vector<int> phys(next_, -1);
    std::vector<uint8_t> free_regs;
    uint32_t used = 0;
    std::vector<std::vector<uint32_t>> release(code_.size() + 1);  // values freed after instruction i
    uint32_t n = 0;
    for (size_t i = 0; i < code_.size(); ++i) {
        const Instr& in = code_[i];
        xylem_fused_instr& out = at.code[n++];
        out.op = in.op;
        out.imm = in.imm;
        const int arity = plugin_kit::fused_opcode_info(in.op).arity;
        const uint32_t args[3] = {in.a, in.b, in.c};
        uint8_t* slots[3] = {&out.a, &out.b, &out.c};
        if (in.op == XYLEM_FUSED_INPUT || in.op == XYLEM_FUSED_PARAM) out.a = static_cast<uint8_t>(in.a);
        for (int k = 0; k < arity; ++k) *slots[k] = static_cast<uint8_t>(phys[args[k]]);
        // operands read for the last time here free their registers before dst is chosen (an
        // instruction reads its operands before it writes)
        for (int k = 0; k < arity; ++k)
            if (last[args[k]] == i && phys[args[k]] >= 0) {
                free_regs.push_back(static_cast<uint8_t>(phys[args[k]]));
                phys[args[k]] = -2;  // freed (a repeated operand is freed once)
            }
        uint8_t r;
        if (!free_regs.empty()) {
            r = free_regs.back();
            free_regs.pop_back();
        } else {
            if (used >= XYLEM_FUSED_MAX_REGS)
                throw Error("fused program needs more than " + std::to_string(XYLEM_FUSED_MAX_REGS) + " registers");
            r = static_cast<uint8_t>(used++);
        }
        out.dst = r;
        phys[in.dst] = r;
        if (last[in.dst] == i) {  // never read: its register is free at once
            free_regs.push_back(r);
            phys[in.dst] = -2;
        }
    }
    for (const auto& o : outputs_) {
        xylem_fused_instr& out = at.code[n++];
        out.op = XYLEM_FUSED_OUTPUT;
        out.dst = static_cast<uint8_t>(o.first);
        out.a = static_cast<uint8_t>(phys[o.second]);
    }
    at.n_instrs = n;
    at.n_regs = std::max<uint32_t>(used, 1);
    return at;
}

std::string FusedBuilder::describe() const {
    std::vector<std::string> text(next_);
    for (const Instr& in : code_) {
        const auto info = plugin_kit::fused_opcode_info(in.op);
        std::string t;
        if (in.op == XYLEM_FUSED_INPUT) t = "in" + std::to_string(in.a);
        else if (in.op == XYLEM_FUSED_PARAM) t = "p" + std::to_string(in.a);
        else if (in.op == XYLEM_FUSED_CONST) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%g", in.imm);
            t = buf;
        } else {
            t = std::string(info.name) + "(" + text[in.a];
            if (info.arity > 1) t += ", " + text[in.b];
            if (info.arity > 2) t += ", " + text[in.c];
            t += ")";
        }
        text[in.dst] = t.size() > 200 ? "(...)" : t;
    }
    std::string s;
    for (const auto& o : outputs_) s += (s.empty() ? "" : "; ") + ("out" + std::to_string(o.first) + " = " + text[o.second]);
    return s;
}

}  // namespace xylem
