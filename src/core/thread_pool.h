// A fork-join pool tuned for many tiny parallel regions (a decode step runs hundreds).
// The calling thread takes part; workers spin briefly on a generation counter before sleeping,
// so a region costs about a microsecond when the pool is hot. run() needs every thread;
// run_dynamic() only the ones that show up (robust to workers the OS has descheduled).
// Invariant: run() is called from one thread at a time (the engine thread).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tern {

class ThreadPool {
 public:
  // n_threads counts the calling thread: n_threads = 1 runs everything inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(thread_index) once on each of n_threads threads and waits for all.
  void run(const std::function<void(int thread_index)>& fn);

  // Calls fn(thread_index) on the calling thread and on each worker that picks the job up before
  // the caller's own call returns; waits only for the workers that did. fn must therefore take
  // its work from shared state (an atomic counter) so that any subset of the threads finishes all
  // of it. On a machine shared with other work a descheduled worker then costs nothing: the
  // caller does its share instead of waiting a scheduler time slice for it.
  void run_dynamic(const std::function<void(int thread_index)>& fn);

  // Splits [0, n) into n_threads contiguous ranges (in units of `grain`) and calls
  // fn(begin, end) for each non-empty one. The split depends only on n, grain and n_threads.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};          // run(): workers yet to finish the job
  std::atomic<uint64_t> static_job_{0};  // generation of the last run() job (every worker runs it)
  std::atomic<uint64_t> open_job_{0};    // run_dynamic(): generation workers may still join, or 0
  std::atomic<int> joined_{0};           // run_dynamic(): workers inside the job
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
};

}  // namespace tern
