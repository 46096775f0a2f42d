// A fixed pool of worker threads with a deterministic parallel_for over an index range.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4 {

// parallel_for(n, fn) splits [0, n) into contiguous chunks and calls fn(begin, end) once per
// chunk. Callers compute each output element entirely inside the chunk that owns it, with an
// order of operations that does not depend on the chunk bounds, so results never depend on
// the number of threads. The calling thread takes part; nested calls run inline.
class ThreadPool {
 public:
  // threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn over [0, n) in at most size() chunks of at least min_chunk indices; returns when
  // every chunk has finished.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t min_chunk = 1);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  bool busy_ = false;
};

// A process-wide pool sized by set_default_threads() (default: hardware concurrency).
ThreadPool& default_thread_pool();
void set_default_threads(int threads);

}  // namespace dsv4
