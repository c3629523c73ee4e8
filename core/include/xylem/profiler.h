// Per-op-kind timing for `xylem train --profile`, in the spirit of Theano's profile mode.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace xylem {

class Device;

namespace profiler {

// While enabled, every op is followed by a stream sync so its time is its own.
void enable(bool on);
bool enabled();
void reset();
void record(uint32_t op, double seconds);
double total_seconds(uint32_t op);
uint64_t calls(uint32_t op);
// The table: op, calls, total ms, mean us, share; then the transfer totals.
void print(std::ostream& out);

}  // namespace profiler
}  // namespace xylem
