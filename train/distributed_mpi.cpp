// Collectives over MPI (compiled when CMake finds MPI). Every collective is a non-blocking MPI call
// completed by polling with a deadline, so a rank that stops answering ends the job with a message
// instead of a hang, and a waiting rank yields its core instead of spinning at full speed.
// The C API only: mpi.h would otherwise pull in Open MPI's (deprecated) C++ bindings and their library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <string>
#include <thread>

#include "xylem/train/distributed.h"
#include "xylem/error.h"

namespace xylem::train {
namespace {

using Clock = std::chrono::steady_clock;

// MPI counts are ints: a larger array goes as several calls of at most this many elements.
constexpr size_t kChunk = size_t{1} << 30;

class MpiCollectives final : public Collectives {
public:
    explicit MpiCollectives(const Launch& launch) : timeout_(collective_timeout_seconds()) {
        int initialized = 0;
        MPI_Initialized(&initialized);
        int provided = 0;
        // Only the training thread calls MPI (OpenBLAS's threads never do).
        if (!initialized && MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            throw Error("MPI_Init failed");
        MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
        // Errors come back as codes (and become Errors naming the operation), not MPI's default abort.
        MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
        if (rank_ != launch.rank || size_ != launch.size)
            throw Error("MPI says this is rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                        ", the environment said " + std::to_string(launch.rank) + " of " + std::to_string(launch.size));
        char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
        int len = 0;
        MPI_Get_library_version(version, &len);
        library_.assign(version, static_cast<size_t>(std::max(len, 0)));
        if (size_t nl = library_.find_first_of("\n,"); nl != std::string::npos) library_.resize(nl);
    }

    ~MpiCollectives() override {
        // Reached on a normal end only: an error ends the job through abort() instead, since
        // MPI_Finalize would wait for ranks that may be blocked in a collective.
        if (!pending_.empty()) return;
        MPI_Comm_free(&comm_);
        MPI_Finalize();
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string library() const override { return library_; }

    void sum(float* data, size_t n, const char* what) override { reduce(data, n, MPI_FLOAT, MPI_SUM, what); }
    void sum(double* data, size_t n, const char* what) override { reduce(data, n, MPI_DOUBLE, MPI_SUM, what); }
    void max(int64_t* data, size_t n, const char* what) override { reduce(data, n, MPI_INT64_T, MPI_MAX, what); }

    void broadcast(void* data, size_t bytes, const char* what) override {
        std::vector<MPI_Request> reqs;
        for (size_t at = 0; at < bytes; at += kChunk) {
            reqs.emplace_back();
            check(MPI_Ibcast(static_cast<char*>(data) + at, static_cast<int>(std::min(kChunk, bytes - at)), MPI_BYTE, 0,
                             comm_, &reqs.back()),
                  what);
        }
        wait(reqs, what);
    }

    std::vector<std::vector<uint64_t>> gather_all(const std::vector<uint64_t>& values, const char* what) override {
        std::vector<uint64_t> all(values.size() * static_cast<size_t>(size_));
        std::vector<MPI_Request> reqs(1);
        check(MPI_Iallgather(values.data(), static_cast<int>(values.size()), MPI_UINT64_T, all.data(),
                             static_cast<int>(values.size()), MPI_UINT64_T, comm_, &reqs[0]),
              what);
        wait(reqs, what);
        std::vector<std::vector<uint64_t>> out;
        for (int r = 0; r < size_; ++r)
            out.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(values.size()) * r,
                             all.begin() + static_cast<std::ptrdiff_t>(values.size()) * (r + 1));
        return out;
    }

    void start_sum(float* data, size_t n) override {
        for (size_t at = 0; at < n; at += kChunk) {
            pending_.emplace_back();
            check(MPI_Iallreduce(MPI_IN_PLACE, data + at, static_cast<int>(std::min(kChunk, n - at)), MPI_FLOAT, MPI_SUM,
                                 comm_, &pending_.back()),
                  "summing gradients");
        }
    }

    void progress() override {
        if (pending_.empty()) return;
        int done = 0;
        check(MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE),
              "summing gradients");
        if (done) pending_.clear();
    }

    void wait_sums(const char* what) override {
        wait(pending_, what);
        pending_.clear();
    }

    [[noreturn]] void abort(int code) override {
        std::fflush(stdout);
        std::fflush(stderr);
        // mpirun forwards this rank's output through a pipe that MPI_Abort's kill can cut short: a
        // moment's pause lets the message that says why reach the user.
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        MPI_Abort(MPI_COMM_WORLD, code);
        ::_exit(code);  // MPI_Abort does not return; this keeps the promise if it ever did
    }

private:
    void reduce(void* data, size_t n, MPI_Datatype type, MPI_Op op, const char* what) {
        int bytes = 0;
        MPI_Type_size(type, &bytes);
        std::vector<MPI_Request> reqs;
        for (size_t at = 0; at < n; at += kChunk) {
            reqs.emplace_back();
            check(MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(data) + at * static_cast<size_t>(bytes),
                                 static_cast<int>(std::min(kChunk, n - at)), type, op, comm_, &reqs.back()),
                  what);
        }
        wait(reqs, what);
    }

    // Polls until every request completes: spins briefly (the other ranks are usually a moment
    // behind), then yields the core, then sleeps in short naps; past the timeout it gives up.
    void wait(std::vector<MPI_Request>& reqs, const char* what) {
        if (reqs.empty()) return;
        const Clock::time_point t0 = Clock::now();
        for (long polls = 0;; ++polls) {
            int done = 0;
            check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE), what);
            if (done) return;
            if (polls < 2000) continue;
            const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
            if (waited > timeout_)
                throw Error("no answer from the other ranks for " +
                            std::to_string(static_cast<long>(waited)) + " s while " + what +
                            " (a rank is hung or stopped; XYLEM_DIST_TIMEOUT sets the limit in seconds)");
            if (waited < 0.002) sched_yield();
            else std::this_thread::sleep_for(std::chrono::microseconds(waited < 0.1 ? 20 : 500));
        }
    }

    void check(int code, const char* what) const {
        if (code == MPI_SUCCESS) return;
        char text[MPI_MAX_ERROR_STRING] = {};
        int len = 0;
        MPI_Error_string(code, text, &len);
        throw Error(std::string("MPI failed while ") + what + ": " + text);
    }

    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0, size_ = 1;
    double timeout_;
    std::string library_;
    std::vector<MPI_Request> pending_;  // started gradient sums
};

}  // namespace

void require_mpi(const Launch&) {}

std::unique_ptr<Collectives> join_ranks(const Launch& launch) { return std::make_unique<MpiCollectives>(launch); }

}  // namespace xylem::train
