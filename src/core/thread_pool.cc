// ThreadPool: static chunking of an index range over fixed workers (see thread_pool.h).
#include "core/thread_pool.h"

#include <algorithm>
#include <memory>

namespace dsv4 {

namespace {
thread_local bool in_pool_job = false;

void run_chunk(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int chunks, int c) {
  const int64_t begin = n * c / chunks;
  const int64_t end = n * (c + 1) / chunks;
  if (begin < end) fn(begin, end);
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    int chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunks = job_chunks_;
    }
    if (index < chunks) {
      in_pool_job = true;
      run_chunk(*job, n, chunks, index);
      in_pool_job = false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t min_chunk) {
  if (n <= 0) return;
  int64_t chunks64 = std::min<int64_t>(size(), (n + std::max<int64_t>(min_chunk, 1) - 1) /
                                                   std::max<int64_t>(min_chunk, 1));
  const int chunks = static_cast<int>(std::max<int64_t>(chunks64, 1));
  if (chunks == 1 || workers_.empty() || in_pool_job) {
    fn(0, n);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  // One job at a time: a second caller waits for the first to finish.
  done_cv_.wait(lock, [&] { return !busy_; });
  busy_ = true;
  job_ = &fn;
  job_n_ = n;
  job_chunks_ = chunks;
  pending_ = static_cast<int>(workers_.size());
  ++generation_;
  lock.unlock();
  start_cv_.notify_all();
  in_pool_job = true;
  run_chunk(fn, n, chunks, 0);
  in_pool_job = false;
  lock.lock();
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  busy_ = false;
  job_ = nullptr;
  lock.unlock();
  done_cv_.notify_all();
}

namespace {
std::mutex default_mu;
std::unique_ptr<ThreadPool> default_pool;
int default_threads = 0;
}  // namespace

ThreadPool& default_thread_pool() {
  std::lock_guard<std::mutex> lock(default_mu);
  if (!default_pool) default_pool = std::make_unique<ThreadPool>(default_threads);
  return *default_pool;
}

void set_default_threads(int threads) {
  std::lock_guard<std::mutex> lock(default_mu);
  default_threads = threads;
  default_pool.reset();
}

}  // namespace dsv4
