// Per-op-kind and per-layer timing for `xylem train --profile`, in the spirit of Theano's
// profile mode.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace xylem::profiler {

// While enabled, every op is followed by a stream sync so its time is its own.
void enable(bool on);
bool enabled();
void reset();
void record(uint32_t op, double seconds);
double total_seconds(uint32_t op);
uint64_t calls(uint32_t op);
// Seconds spent in `op` inside scopes named `scope` (e.g. "model layer 0 (conv2d) backward").
double scope_seconds(const std::string& scope, uint32_t op);
double scope_seconds(const std::string& scope);  // all ops of the scope
// A fact about how the run computes, printed once under the tables whatever the number of calls
// ("attention_fwd is composed from ..."). Kept from the first call, also while profiling is off.
void note(const std::string& text);
std::vector<std::string> notes();
// The tables: per op kind (calls, total ms, mean us, share), per scope, then transfers.
void print(std::ostream& out);

// Ops recorded while a Scope lives on this thread are also attributed to its name.
class Scope {
public:
    explicit Scope(const std::string* name);  // null: no scope (cheap when profiling is off)
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

private:
    const std::string* previous_;
};

}  // namespace xylem::profiler
