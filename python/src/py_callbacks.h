// Python callbacks inside train::fit: a train::Callbacks that calls the Python objects' hooks
// (on_train_batch_end, on_epoch_end, on_validation_end) with the GIL taken for the call only, and
// turns their wish to stop (model.stop_training, a hook's exception) into fit's own stop requests.
#pragma once

#include <exception>
#include <string>

#include "binding.h"
#include "xylem/train/callbacks.h"
#include "xylem/train/fit.h"

namespace xylem::python {

// A stop asked for by Python rather than by a signal: fit's stop_requested() wants a nonzero int.
inline constexpr int kStopFromPython = -1;

class PyCallbacks final : public train::Callbacks {
public:
    // `callbacks`: the Python list; `owner`: the Python Model, whose stop_training flag any hook may set.
    PyCallbacks(nb::object callbacks, nb::object owner);
    bool wants_progress(const train::FitContext& ctx, int64_t steps_run) override;
    void on_log_row(const train::FitContext&, const train::LogRow& row) override { last_loss_ = row.loss; }
    int stop_requested() override { return stop_ ? kStopFromPython : 0; }
    void on_validation(const train::FitContext&, train::EpochMetrics& m) override;
    std::string stop_after_epoch(const train::FitContext&, const std::vector<train::EpochMetrics>&) override;
    void on_epoch_end(const train::FitContext&, const train::EpochMetrics& m, bool best,
                      const std::string& finish_reason) override;
    // The exception a hook raised (fit stopped after it), rethrown once fit has returned.
    void rethrow_if_failed();

private:
    // Calls `hook`(args...) on every callback that defines it; a raise stops the run.
    template <class... A> void call(const char* hook, A&&... args);
    void check_stop_flag();

    nb::object callbacks_, owner_;
    bool batch_hook_ = false, validation_hook_ = false, epoch_hook_ = false;
    bool stop_ = false;
    std::string stop_reason_;
    double last_loss_ = 0;
    std::exception_ptr error_;
};

// One epoch's metrics as the History and the callbacks see them (Keras's names).
nb::dict epoch_logs(const train::EpochMetrics& m);

}  // namespace xylem::python
