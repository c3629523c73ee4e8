// The one line a failure prints (failure.h).
#include "failure.h"

#include <filesystem>
#include <new>
#include <typeinfo>

#include "xylem/error.h"

namespace xylem::cli {

std::string activity(const Args& a) {
    std::string s = "xylem " + a.command;
    if (!a.config.empty()) s += " --config " + a.config;
    if (a.resume) s += " --resume" + (a.resume_dir.empty() ? "" : " " + a.resume_dir);
    if (!a.checkpoint.empty()) s += " --checkpoint " + a.checkpoint;
    if (!a.input.empty()) s += " --input " + a.input;
    for (const std::string& o : a.operands) s += " " + o;
    return s;
}

std::string failure_text(const std::exception& e, const Args& a) {
    if (dynamic_cast<const Error*>(&e)) return e.what();  // already a sentence naming its cause
    const std::string doing = a.command.empty() ? "xylem" : activity(a);
    if (dynamic_cast<const std::bad_alloc*>(&e))
        return "out of memory in " + doing + ": the machine could not give it the memory it asked for (" + e.what() +
               "); smaller data, a smaller model or batch, or a machine with more memory";
    if (const auto* f = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) return doing + ": " + f->what();
    return doing + " failed unexpectedly: " + e.what() + " (" + typeid(e).name() + "; please report it)";
}

}  // namespace xylem::cli
