// The one line a failure prints: an xylem::Error as it is, anything else (out of memory, an
// unexpected exception) as a sentence naming what the command was doing, never a bare type name.
#pragma once

#include <exception>
#include <string>

#include "commands.h"

namespace xylem::cli {

// "xylem train --config a.toml --resume runs/a": the command and what it works on.
std::string activity(const Args& args);

// The message after "xylem: error: " for `e`, raised while doing `args`.
std::string failure_text(const std::exception& e, const Args& args);

}  // namespace xylem::cli
