// The processes of a data-parallel run and the collectives among them, over host memory. This is
// the trainer's only view of MPI: distributed_mpi.cpp implements it with Open MPI and is compiled
// only when CMake finds MPI; without it (distributed_none.cpp) a distributed launch is an error
// that says how to get MPI, and every single-process run is unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xylem::train {

// How this process was started: alone, or as one rank of `mpirun -np N` (read from Open MPI's
// OMPI_COMM_WORLD_SIZE, _RANK and _LOCAL_RANK; a malformed value is an Error naming it).
struct Launch {
    int rank = 0, size = 1;
    int local_rank = 0, local_size = 1;  // among the ranks on this machine (picks the device, shares the cores)
    bool distributed() const { return size > 1; }
};
Launch launch_from_environment();

// The ranks on one machine share its cores: unless the config (`threads`) or XYLEM_NUM_THREADS
// sets the native backend's thread count, each rank gets its part of the CPUs it may use (at
// least one), as torchrun sets OMP_NUM_THREADS. Returns the count set, or 0 if left alone.
int share_cores(const Launch& launch, int config_threads);

// Collectives among the ranks of one run. Every rank calls the same ones in the same order with
// the same sizes. A call that is not answered within timeout_seconds() (a rank hung or stopped)
// throws an Error naming the operation, and the caller ends the job (abort()); a rank that dies
// makes mpirun end the others.
class Collectives {
public:
    virtual ~Collectives() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual std::string library() const = 0;  // "Open MPI v4.1.4, ..."

    // In-place sums and maxima over the ranks; `what` names the operation in errors.
    virtual void sum(float* data, size_t n, const char* what) = 0;
    virtual void sum(double* data, size_t n, const char* what) = 0;
    virtual void max(int64_t* data, size_t n, const char* what) = 0;
    // Rank 0's `bytes` bytes at `data` to every rank.
    virtual void broadcast(void* data, size_t bytes, const char* what) = 0;
    // Every rank's `values` (the same count on each), rank by rank.
    virtual std::vector<std::vector<uint64_t>> gather_all(const std::vector<uint64_t>& values, const char* what) = 0;

    // Non-blocking sums for gradient buckets: start_sum returns at once (leave `data` alone until
    // wait_sums), progress lets the started sums advance (MPI moves data only inside its calls),
    // wait_sums waits for all of them.
    virtual void start_sum(float* data, size_t n) = 0;
    virtual void progress() = 0;
    virtual void wait_sums(const char* what) = 0;

    // Ends every rank of the job now with exit status `code` (after the caller printed why).
    [[noreturn]] virtual void abort(int code) = 0;
};

// An Error, saying how to get MPI, when `launch` is distributed and this build has no MPI. Called
// first thing, before any work.
void require_mpi(const Launch& launch);
// Joins the launch's ranks (MPI_Init): after the backend is chosen, since choosing it forks
// processes (to probe plugins), which must not happen once MPI has started.
std::unique_ptr<Collectives> join_ranks(const Launch& launch);

// Seconds a collective may wait for the other ranks: XYLEM_DIST_TIMEOUT, else 300.
double collective_timeout_seconds();

}  // namespace xylem::train
