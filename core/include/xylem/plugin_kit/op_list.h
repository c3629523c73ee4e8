// Plugin kit: op lists and the op -> kernel table a plugin dispatches through. Header-only C++17.
//
// XYLEM_PLUGIN_KIT_OPS(X) is every op of ops.h in enum order as X(name), generated from ops.h's
// XYLEM_OP_LIST (the one list of op names). A plugin declares the ops it implements as a list of
// its own in the same form, or uses XYLEM_PLUGIN_KIT_OPS when it implements them all; it defines a
// kernel op_<name> for each listed op and nothing for the others, which supports_op reports
// unsupported, the conformance kit lists as unsupported, and the core refuses at model build:
//
//   #define MY_OPS(X) X(fill) X(copy) X(gemm) X(linear_fwd)                 // what this plugin implements
//   #define DECLARE(name) void op_##name(const xylem_op_desc&, xylem_stream_s&);
//   MY_OPS(DECLARE)
//   using OpFn = void (*)(const xylem_op_desc&, xylem_stream_s&);
//   constexpr auto kOps = xylem::plugin_kit::op_table<OpFn>({MY_OPS(XYLEM_PLUGIN_KIT_OP_ENTRY)});
//   int32_t op_supported(xylem_framework_t, uint32_t op) { return kOps.supports(op); }
//   // op_run: guarded_op_run<Plugin>(desc, stream, kOps.fn, ...) (errors.h)
//
// A name that is not an op of ops.h, or an op listed twice, fails to compile.
#pragma once

#include <cstddef>
#include <cstdint>

#include "xylem/ops.h"

// X(number, ENUM, name) -> X(name): the list's entries are rescanned once more by the outer
// expansion, so `X (name)` becomes a call of the caller's macro X.
#define XYLEM_PLUGIN_KIT_NAME_ONLY_(number, ENUM, name) (name)
#define XYLEM_PLUGIN_KIT_EXPAND_(...) __VA_ARGS__
#define XYLEM_PLUGIN_KIT_OPS(X) XYLEM_PLUGIN_KIT_EXPAND_(XYLEM_OP_LIST(X XYLEM_PLUGIN_KIT_NAME_ONLY_))

// One table entry {op number, op_<name>} of a plugin's op list; OpFn is the plugin's kernel type.
#define XYLEM_PLUGIN_KIT_OP_ENTRY(name) {::xylem::plugin_kit::op_id::name, op_##name},

namespace xylem::plugin_kit {

// op_id::gemm == XYLEM_OP_GEMM: op numbers by lower-case name, for op lists.
namespace op_id {
enum : uint32_t {
#define XYLEM_PLUGIN_KIT_OP_ID_(number, ENUM, name) name = number,
    XYLEM_OP_LIST(XYLEM_PLUGIN_KIT_OP_ID_)
#undef XYLEM_PLUGIN_KIT_OP_ID_
};
}  // namespace op_id

template <class Fn>
struct OpEntry {
    uint32_t op;
    Fn fn;
};

// Indexed by op number; null where the plugin does not implement the op.
template <class Fn>
struct OpTable {
    Fn fn[XYLEM_OP_COUNT_] = {};
    uint32_t count = 0;  // ops implemented

    constexpr int32_t supports(uint32_t op) const { return op < XYLEM_OP_COUNT_ && fn[op] ? 1 : 0; }
};

namespace detail {
// Called only when a list names an op twice: not constexpr, so the table's constant evaluation
// fails to compile there.
inline void op_listed_twice() {}
}  // namespace detail

template <class Fn, size_t N>
constexpr OpTable<Fn> op_table(const OpEntry<Fn> (&entries)[N]) {
    OpTable<Fn> t{};
    for (size_t i = 0; i < N; ++i) {
        if (t.fn[entries[i].op]) detail::op_listed_twice();
        t.fn[entries[i].op] = entries[i].fn;
        ++t.count;
    }
    return t;
}

}  // namespace xylem::plugin_kit
