// The plugin's worker threads: a pool, started on first use, that runs the items of one parallel
// kernel at a time (fused programs' tiles, GEMM blocks, conv slices). After a job a worker spins
// for kSpin on an atomic for the next one, then sleeps on a condition variable: an LSTM step
// issues a small GEMM or fused program every ~30 us, and a condition-variable wake-up costs tens
// of microseconds on a VM, while 500 us of spinning after the last op is all an idle pool costs.
// (OpenMP runtimes spin for 200 ms by default.)
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "native.h"

namespace xylem::native {

namespace {

// How long an idle helper spins for the next job before sleeping, and the caller for a helper's
// last item: a wake-up through the condition variable costs tens of microseconds on a VM, the
// length of the small GEMMs and fused programs an LSTM step issues back to back. A GELU of 393k
// elements after 2 ms without a job took 390 us against 165 us with the helper awake. 500 us and
// not 50: a training step runs stretches of small one-thread ops (a GPT's layer norms, permutes,
// per-parameter clip and AdamW programs) longer than 50 us between its parallel ones, after
// which each parallel op paid the wake-up (the character GPT 3.5% faster a step, 150 steps, four
// interleaved pairs; ResNet-20 2-3%; MLP, LeNet and char-rnn unchanged). OpenMP runtimes spin
// for 200 ms by default. A data-parallel rank on a shared machine runs one thread: no helpers.
constexpr std::chrono::microseconds kSpin{500};

struct Job {
    void (*fn)(void* ctx, int worker, int64_t item);
    void* ctx;
    int64_t n_items;
    std::atomic<int64_t> next{0};

    // Claims items until none is left: faster threads take more, so a slow CPU delays no one.
    void work(int worker) {
        for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) fn(ctx, worker, i);
    }
};

class Pool {
public:
    // Runs `job` on the calling thread (worker 0) and up to workers - 1 pool threads; returns
    // when every item has run. A second caller while a job runs (ops on two streams at once) runs
    // its items alone rather than wait; so does a child after fork(), which has none of the threads.
    void run(int workers, Job& job) {
        std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
        if (!busy.owns_lock() || getpid() != pid_) return job.work(0);
        while (static_cast<int>(threads_.size()) < workers - 1) {
            try {
                threads_.emplace_back(&Pool::loop, this, static_cast<int>(threads_.size()) + 1);
            } catch (const std::system_error&) {
                break;  // run with the threads we have
            }
        }
        bool sleepers;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            job_ = &job;
            helpers_ = std::min(workers - 1, static_cast<int>(threads_.size()));
            generation_.fetch_add(1, std::memory_order_release);
            sleepers = sleepers_ > 0;
        }
        if (sleepers) wake_.notify_all();  // the others are still spinning on generation_
        job.work(0);
        // Withdraw the job, then wait only for the helpers that joined it: one the scheduler has
        // not woken yet (a busy machine) costs nothing, its items taken here instead. A helper
        // still inside is waited for by spinning a little first (its last item is short).
        std::unique_lock<std::mutex> lock(mutex_);
        job_ = nullptr;
        if (running_.load() > 0) {
            lock.unlock();
            const auto until = std::chrono::steady_clock::now() + kSpin;
            while (running_.load(std::memory_order_acquire) > 0 && std::chrono::steady_clock::now() < until)
                pause();
            lock.lock();
        }
        done_.wait(lock, [this] { return running_.load() == 0; });
    }

private:
    static void pause() {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }

    void loop(int index) {
        std::unique_lock<std::mutex> lock(mutex_);
        uint64_t seen = 0;
        for (;;) {
            if (generation_.load() == seen) {  // spin a little for the next job before sleeping
                lock.unlock();
                const auto until = std::chrono::steady_clock::now() + kSpin;
                while (generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until)
                    pause();
                lock.lock();
                ++sleepers_;
                wake_.wait(lock, [&] { return generation_.load() != seen; });
                --sleepers_;
            }
            seen = generation_.load();
            if (!job_ || index > helpers_) continue;  // withdrawn already, or not needed
            Job* job = job_;  // stays alive: run() waits for running_ to drop back to 0
            running_.fetch_add(1);
            lock.unlock();
            job->work(index);
            lock.lock();
            if (running_.fetch_sub(1, std::memory_order_release) == 1) done_.notify_one();
        }
    }

    std::mutex busy_;  // held by the caller whose job runs
    std::mutex mutex_;  // guards what follows but threads_
    std::condition_variable wake_, done_;
    std::vector<std::thread> threads_;  // grown under busy_
    Job* job_ = nullptr;       // the job helpers may join; null once its caller has done its part
    // Changed under mutex_; atomic so that a spinning helper (generation_) or caller (running_)
    // can watch them without it.
    std::atomic<uint64_t> generation_{0};  // one more per job: what wakes the helpers
    std::atomic<int> running_{0};          // helpers inside the current job
    int helpers_ = 0;                      // pool threads 1..helpers_ may join the current job
    int sleepers_ = 0;                     // helpers asleep on wake_ (the others spin on generation_)
    const pid_t pid_ = getpid();
};

}  // namespace

void run_items(int64_t n_items, int workers, void (*fn)(void*, int, int64_t), void* ctx) {
    Job job{fn, ctx, n_items};
    if (workers <= 1 || n_items <= 1) return job.work(0);
    // Never destroyed: its threads wait on its condition variable until the process ends (the
    // core never unloads a plugin), so no exit-time join can hang.
    static Pool* pool = new Pool;
    pool->run(workers, job);
}

}  // namespace xylem::native
