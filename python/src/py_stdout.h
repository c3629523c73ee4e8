// fit's progress lines through Python's sys.stdout rather than the process's file descriptor 1:
// in a notebook (Jupyter's sys.stdout is a stream of the kernel's), in a script whose sys.stdout
// was replaced, or under pytest's capture, they land where Python's own prints do.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <streambuf>
#include <string>

namespace xylem::python {

namespace nb = nanobind;

// An std::streambuf that gathers what is written and hands it to sys.stdout.write at each flush
// (RunReport flushes after every line). fit runs with the GIL released, so the flush takes it for
// the write. A sys.stdout that fails to write (closed, None) loses the line, not the run.
class PyStdout : public std::streambuf {
public:
    PyStdout() = default;
    PyStdout(const PyStdout&) = delete;
    PyStdout& operator=(const PyStdout&) = delete;
    ~PyStdout() override { forward(); }

    // Whether the progress line is rewritten in place ("\r"): sys.stdout is a terminal, or a
    // notebook kernel's stream (ipykernel's OutStream draws "\r" as a rewrite). Call with the GIL held.
    static bool live() {
        try {
            nb::object out = nb::module_::import_("sys").attr("stdout");
            if (out.is_none()) return false;
            if (nb::hasattr(out, "isatty") && nb::cast<bool>(out.attr("isatty")())) return true;
            return nb::cast<bool>(nb::module_::import_("sys").attr("modules").attr("__contains__")("ipykernel"));
        } catch (const nb::python_error&) {
            return false;
        }
    }

protected:
    int_type overflow(int_type c) override {
        if (!traits_type::eq_int_type(c, traits_type::eof())) pending_.push_back(traits_type::to_char_type(c));
        return traits_type::not_eof(c);
    }
    std::streamsize xsputn(const char* s, std::streamsize n) override {
        pending_.append(s, static_cast<size_t>(n));
        return n;
    }
    int sync() override {
        forward();
        return 0;
    }

private:
    void forward() noexcept {
        if (pending_.empty()) return;
        nb::gil_scoped_acquire gil;
        try {
            nb::object out = nb::module_::import_("sys").attr("stdout");
            if (!out.is_none()) {
                out.attr("write")(pending_);
                if (nb::hasattr(out, "flush")) out.attr("flush")();
            }
        } catch (const nb::python_error&) {  // destroyed here, with the GIL held
        }
        pending_.clear();
    }

    std::string pending_;
};

}  // namespace xylem::python
