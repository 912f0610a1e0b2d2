#include "parallel.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../errors.hpp"
#include "../threads.hpp"

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

// Workers 1..W wait for a job (a new generation), run their chunk of it and
// count down; the caller runs chunk 0 and waits for the count to reach 0.
// One job at a time: `caller_` is held for its whole length.
class Pool {
 public:
  ~Pool() { resize(0); }

  // Runs the job on `chunks` threads, or returns false when another caller
  // holds the pool (then the caller runs the job alone).
  bool run(std::size_t chunks, std::size_t chunk, std::size_t n, detail::RangeBody body,
           void* context) {
    std::unique_lock<std::mutex> caller(caller_, std::try_to_lock);
    if (!caller.owns_lock()) return false;
    if (workers_.size() + 1 < chunks) resize(chunks - 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = body;
      context_ = context;
      n_ = n;
      chunk_ = chunk;
      chunks_ = chunks;
      remaining_ = chunks - 1;
      ++generation_;
    }
    wake_.notify_all();
    t_in_job = true;
    body(context, 0, std::min(chunk, n));
    t_in_job = false;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return remaining_ == 0; });
    return true;
  }

  // Keeps `workers` threads (fewer: the others are joined).
  void resize_to(std::size_t workers) {
    std::lock_guard<std::mutex> caller(caller_);
    resize(workers);
  }

 private:
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
    while (workers_.size() < workers) {
      const std::size_t index = workers_.size() + 1;
      workers_.emplace_back([this, index, seen] { work(index, seen); });
    }
  }

  void work(std::size_t index, std::uint64_t seen) {
    t_in_job = true;
    for (;;) {
      detail::RangeBody body;
      void* context;
      std::size_t begin, end;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (index >= chunks_) continue;
        body = body_;
        context = context_;
        begin = std::min(index * chunk_, n_);
        end = std::min(begin + chunk_, n_);
      }
      body(context, begin, end);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--remaining_ == 0) done_.notify_one();
    }
  }

  std::mutex caller_;
  std::mutex mutex_;  // guards everything below
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  detail::RangeBody body_ = nullptr;
  void* context_ = nullptr;
  std::size_t n_ = 0, chunk_ = 0, chunks_ = 0, remaining_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool& pool() {
  static Pool instance;
  return instance;
}

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
  const std::size_t chunks = parallel_chunks(n, min_per_thread);
  if (chunks > 1) {
    // ceil(n / chunks), rounded up to the alignment
    const std::size_t chunk = ((n + chunks - 1) / chunks + align - 1) / align * align;
    const std::size_t used = (n + chunk - 1) / chunk;
    if (used > 1 && pool().run(used, chunk, n, body, context)) return;
  }
  body(context, 0, n);
}

}  // namespace xtgrad
