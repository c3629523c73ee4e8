// How this process was launched, read from the environment mpirun sets; shared by the builds
// with and without MPI.
#include "xylem/train/distributed.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>

#include "xylem/env.h"
#include "xylem/error.h"

namespace xylem::train {
namespace {

// The variable's value as an int in [lo, hi], or `fallback` when unset.
int env_int(const char* name, int lo, int hi, int fallback) {
    const char* v = std::getenv(name);
    if (!v) return fallback;
    const std::string s(v);
    int x = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || x < lo || x > hi)
        throw Error(std::string(name) + "='" + s + "' is not a number in [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "] (mpirun sets it; is the environment of this launch mixed up?)");
    return x;
}

}  // namespace

Launch launch_from_environment() {
    Launch l;
    // Open MPI's mpirun (and Slurm's srun with Open MPI's PMIx) set these for every process.
    l.size = env_int("OMPI_COMM_WORLD_SIZE", 1, 1 << 20, 1);
    if (l.size == 1) return l;  // `mpirun -np 1` is a single-process run
    l.rank = env_int("OMPI_COMM_WORLD_RANK", 0, l.size - 1, -1);
    if (l.rank < 0) throw Error("OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not");
    l.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, l.size - 1, 0);
    l.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, l.size, 1);
    return l;
}

int share_cores(const Launch& launch, int config_threads) {
    if (!launch.distributed() || config_threads > 0 || env::num_threads().set) return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    const int threads = std::max(1, cpus / std::max(1, launch.local_size));
    setenv("XYLEM_NUM_THREADS", std::to_string(threads).c_str(), 0);
    return threads;
}

double collective_timeout_seconds() {
    return env::value_or(env::dist_timeout(), 300.0);
}

}  // namespace xylem::train
