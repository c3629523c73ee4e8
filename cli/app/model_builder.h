// Builds a Sequential model, its loss and its solver from a run configuration.
#pragma once

#include <memory>

#include "xylem/config.h"
#include "xylem/layers/loss.h"
#include "xylem/layers/sequential.h"
#include "xylem/solvers/solver.h"

namespace xylem::app {

std::unique_ptr<Sequential> build_model(const RunConfig& config);
std::unique_ptr<Solver> build_solver(const RunConfig& config);

}  // namespace xylem::app
