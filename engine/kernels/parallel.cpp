#include "parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../errors.hpp"
#include "../threads.hpp"
#include "malloc_tuning.hpp"

// OpenBLAS's own thread API. Its cblas.h declares it, a generic cblas.h does
// not; weak, so that a BLAS without it leaves the count to that BLAS.
extern "C" {
void openblas_set_num_threads(int num_threads) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
}

namespace xtgrad {

namespace {

int initial_threads() {
  if (openblas_get_num_threads) return std::max(openblas_get_num_threads(), 1);
  return static_cast<int>(std::max(std::thread::hardware_concurrency(), 1u));
}

std::atomic<int>& thread_count() {
  static std::atomic<int> count{initial_threads()};
  return count;
}

// True while this thread runs a chunk of a job (a worker's, or the caller's
// chunk 0): a parallel_for inside a chunk runs serially, never re-entering
// the pool.
thread_local bool t_in_job = false;

// How long a worker keeps polling for the next job before it sleeps, and
// the caller for its last chunks in flight before it sleeps: waking a thread
// from its condition variable costs about 40 us on a 2-vCPU VM (a tail of
// 0.6-0.9 ms at the 90th percentile), as long as a short pass itself, while
// the passes of one op or of a training step's ops follow each other within
// tens of microseconds. The polling yields the core after every few checks,
// so that a thread with work (another process, OpenBLAS's own threads) is
// delayed by at most a scheduler switch.
constexpr std::chrono::microseconds k_spin{100};

// Polls `ready` until it holds or k_spin has passed; returns its last value.
template <class F>
bool spin_until(F&& ready) {
  constexpr int k_checks_per_yield = 16;
  const auto until = std::chrono::steady_clock::now() + k_spin;
  for (;;) {
    for (int i = 0; i < k_checks_per_yield; ++i) {
      if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= until) return ready();
    std::this_thread::yield();
  }
}

// A job is `chunks` fixed chunks that the caller and the workers claim one
// at a time (under the mutex) until none is left; the caller then waits only
// for the chunks in flight on a worker. A worker the scheduler has not run
// yet (the second core busy with other work) thus costs nothing: the caller
// takes its chunks, and the worker, when it wakes, finds none left. Which
// thread runs a chunk never changes what the chunk computes.
// One job at a time: `caller_` is held for its whole length.
class Pool {
 public:
  ~Pool() { resize(0); }

  // Runs the job with up to `workers` helpers, or returns false when
  // another caller holds the pool (then the caller runs the job alone).
  bool run(std::size_t workers, std::size_t chunks, std::size_t chunk, std::size_t n,
           detail::RangeBody body, void* context) {
    std::unique_lock<std::mutex> caller(caller_, std::try_to_lock);
    if (!caller.owns_lock()) return false;
    if (workers_.size() < workers) resize(workers);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = body;
      context_ = context;
      n_ = n;
      chunk_ = chunk;
      chunks_ = chunks;
      next_ = 0;
      in_flight_ = 0;
      ++generation_;
    }
    wake_.notify_all();
    t_in_job = true;
    std::unique_lock<std::mutex> lock(mutex_);
    while (next_ < chunks_) {
      const std::size_t index = next_++;
      lock.unlock();
      run_chunk(index);
      lock.lock();
    }
    if (in_flight_ != 0) {  // a worker's last chunks: poll a while before sleeping
      lock.unlock();
      spin_until([&] { return in_flight_.load(std::memory_order_acquire) == 0; });
      lock.lock();
    }
    done_.wait(lock, [&] { return in_flight_ == 0; });
    t_in_job = false;
    return true;
  }

  // Keeps `workers` threads (fewer: the others are joined).
  void resize_to(std::size_t workers) {
    std::lock_guard<std::mutex> caller(caller_);
    resize(workers);
  }

 private:
  // Chunk `index` of the current job (its fields are stable while it runs).
  void run_chunk(std::size_t index) {
    const std::size_t begin = std::min(index * chunk_, n_);
    body_(context_, begin, std::min(begin + chunk_, n_));
  }

  void resize(std::size_t workers) {
    if (workers < workers_.size()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
      }
      wake_.notify_all();
      for (std::thread& w : workers_) w.join();
      workers_.clear();
      stop_ = false;
    }
    std::uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      seen = generation_;
    }
    while (workers_.size() < workers) workers_.emplace_back([this, seen] { work(seen); });
  }

  void work(std::uint64_t seen) {
    t_in_job = true;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (!stop_ && generation_ == seen) {  // poll a while for the next job before sleeping
        lock.unlock();
        spin_until([&] { return stop_.load() || generation_.load() != seen; });
        lock.lock();
      }
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      while (next_ < chunks_) {  // the current job's chunks, while any is left
        const std::size_t index = next_++;
        ++in_flight_;
        lock.unlock();
        run_chunk(index);
        lock.lock();
        if (--in_flight_ == 0 && next_ == chunks_) done_.notify_one();
      }
    }
  }

  std::mutex caller_;
  std::mutex mutex_;  // guards everything below (the atomics are also polled without it)
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  detail::RangeBody body_ = nullptr;
  void* context_ = nullptr;
  std::size_t n_ = 0, chunk_ = 0, chunks_ = 0, next_ = 0;
  std::atomic<std::size_t> in_flight_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

// Chunks per thread in use: a thread that starts late leaves its share to
// the others, a quarter at a time.
constexpr std::size_t k_chunks_per_thread = 4;

Pool& pool() {
  static Pool instance;
  return instance;
}

// glibc's malloc set once at start-up, here because every op links this
// file (malloc_tuning.hpp says what and why).
[[maybe_unused]] const bool malloc_tuned = detail::tune_malloc();

}  // namespace

void set_num_threads(int n) {
  if (n < 1)
    detail::fail_argument("set_num_threads", "n",
                          "is " + std::to_string(n) + ", expected at least 1");
  thread_count().store(n);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
  pool().resize_to(static_cast<std::size_t>(n) - 1);
}

int get_num_threads() {
  return thread_count().load();
}

std::size_t detail::parallel_chunks(std::size_t n, std::size_t min_per_thread) {
  if (t_in_job) return 1;
  const std::size_t threads = static_cast<std::size_t>(get_num_threads());
  return std::max<std::size_t>(std::min(threads, n / std::max<std::size_t>(min_per_thread, 1)), 1);
}

void detail::parallel_run(std::size_t n, std::size_t min_per_thread, std::size_t align,
                          RangeBody body, void* context) {
  const std::size_t threads = parallel_chunks(n, min_per_thread);
  if (threads > 1) {
    // k_chunks_per_thread chunks a thread (fewer when that would make them
    // smaller than min_per_thread), each rounded up to the alignment
    const std::size_t parts = std::max<std::size_t>(
        std::min(threads * k_chunks_per_thread, n / std::max<std::size_t>(min_per_thread, 1)),
        threads);
    const std::size_t chunk = ((n + parts - 1) / parts + align - 1) / align * align;
    const std::size_t chunks = (n + chunk - 1) / chunk;
    if (chunks > 1 && pool().run(threads - 1, chunks, chunk, n, body, context)) return;
  }
  body(context, 0, n);
}

}  // namespace xtgrad
