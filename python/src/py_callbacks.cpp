// Python callbacks inside train::fit.
#include "py_callbacks.h"

#include <nanobind/stl/string.h>

namespace xylem::python {

nb::dict epoch_logs(const train::EpochMetrics& m) {
    nb::dict d;
    d["epoch"] = m.epoch;
    d["loss"] = m.train_loss;
    if (m.has_validation) {
        d["val_loss"] = m.val_loss;
        d["val_accuracy"] = m.val_accuracy;
    }
    d["lr"] = m.lr;
    d["steps"] = m.steps;
    d["seconds"] = m.seconds;
    d["samples_per_second"] = m.images_per_second;
    return d;
}

PyCallbacks::PyCallbacks(nb::object callbacks, nb::object owner) : callbacks_(std::move(callbacks)), owner_(std::move(owner)) {
    for (nb::handle cb : callbacks_) {
        batch_hook_ = batch_hook_ || nb::hasattr(cb, "on_train_batch_end");
        validation_hook_ = validation_hook_ || nb::hasattr(cb, "on_validation_end");
        epoch_hook_ = epoch_hook_ || nb::hasattr(cb, "on_epoch_end");
    }
}

// Called with the GIL held (the arguments are Python objects).
template <class... A> void PyCallbacks::call(const char* hook, A&&... args) {
    if (stop_ && error_) return;  // a hook already failed: the run is ending
    try {
        for (nb::handle cb : callbacks_)
            if (nb::hasattr(cb, hook)) cb.attr(hook)(args...);
        check_stop_flag();
    } catch (nb::python_error& e) {
        e.restore();  // back into Python's error state, then out as an exception_ptr fit cannot see
        error_ = std::make_exception_ptr(nb::python_error());
        stop_ = true;
    }
}

void PyCallbacks::check_stop_flag() {
    if (!stop_ && nb::hasattr(owner_, "stop_training") && nb::cast<bool>(owner_.attr("stop_training"))) {
        stop_ = true;
        stop_reason_ = "a callback set model.stop_training";
    }
}

bool PyCallbacks::wants_progress(const train::FitContext& ctx, int64_t) {
    // Called after every step: the per-batch hook, without a loss read (that would sync the device
    // every step; the loss of the last print_every row is passed instead).
    if (batch_hook_) {
        nb::gil_scoped_acquire locked;
        nb::dict logs;
        logs["loss"] = last_loss_;
        const int64_t batch = ctx.state.step;  // steps done in this epoch, this one included
        call("on_train_batch_end", batch - 1, logs);
    }
    return false;
}

void PyCallbacks::on_validation(const train::FitContext&, train::EpochMetrics& m) {
    if (!validation_hook_ || !m.has_validation) return;
    nb::gil_scoped_acquire locked;  // before the logs dict is made
    call("on_validation_end", m.epoch - 1, epoch_logs(m));
}

std::string PyCallbacks::stop_after_epoch(const train::FitContext&, const std::vector<train::EpochMetrics>&) {
    if (stop_ && !error_) return stop_reason_;
    return "";
}

void PyCallbacks::on_epoch_end(const train::FitContext&, const train::EpochMetrics& m, bool, const std::string&) {
    if (!epoch_hook_) return;
    nb::gil_scoped_acquire locked;  // before the logs dict is made
    call("on_epoch_end", m.epoch - 1, epoch_logs(m));
}

void PyCallbacks::rethrow_if_failed() {
    if (error_) std::rethrow_exception(error_);
}

}  // namespace xylem::python
