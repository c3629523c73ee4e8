// A build without MPI: single-process runs only, and a clear error for a distributed launch.
#include "xylem/train/distributed.h"
#include "xylem/error.h"

namespace xylem::train {

void require_mpi(const Launch& launch) {
    if (launch.distributed())
        throw Error("this xylem was built without MPI, but mpirun started it as rank " + std::to_string(launch.rank) +
                    " of " + std::to_string(launch.size) +
                    ": install Open MPI (libopenmpi-dev; scripts/install-deps.sh) and rebuild, or run xylem without mpirun");
}

std::unique_ptr<Collectives> join_ranks(const Launch& launch) {
    require_mpi(launch);
    throw Error("this xylem was built without MPI");
}

}  // namespace xylem::train
