// xylem::Error: the one exception type the core throws; its message is a complete user-facing line.
#pragma once

#include <stdexcept>
#include <string>

namespace xylem {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace xylem
