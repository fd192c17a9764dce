#include "core/thread_pool.h"

#include <algorithm>

#include "core/check.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define TERN_PAUSE() _mm_pause()
#else
#define TERN_PAUSE() std::this_thread::yield()
#endif

namespace tern {
namespace {
// Spins before a worker sleeps. ~50 us at a few ns per pause: long enough to bridge the gap
// between two ops of a decode step, short enough not to burn a core while idle.
constexpr int kSpinIterations = 20000;
// Pauses the caller spins on unfinished workers before it starts yielding its core.
constexpr int kSpinBeforeYield = 2000;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      if (spin < kSpinBeforeYield) {
        TERN_PAUSE();
      } else {
        std::this_thread::yield();
      }
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    // A run() job cannot be followed by another before this worker has run it, so comparing
    // its generation is enough; a run_dynamic() job may already be over (see below).
    if (static_job_.load(std::memory_order_acquire) == gen) {
      (*job_)(index);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
      continue;
    }
    // note: Dekker-style handshake with run_dynamic (all seq_cst): either the caller sees this
    // worker in joined_ and waits for it, or this worker sees the job closed and skips it, so
    // job_ is never used after the caller has returned.
    joined_.fetch_add(1);
    if (open_job_.load() == gen) (*job_)(index);
    joined_.fetch_sub(1);
  }
}

void ThreadPool::run(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  static_job_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  fn(0);
  // Spin briefly (the common case: the workers finish within microseconds), then yield so that
  // on an oversubscribed machine a descheduled worker gets the core instead of this spin.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinBeforeYield) {
      TERN_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::run_dynamic(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  // The generation this job gets; no other thread bumps it (run* are called from one thread).
  const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  open_job_.store(gen);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  fn(0);
  open_job_.store(0);  // close: workers that have not joined yet skip the job
  for (int spin = 0; joined_.load() != 0; ++spin) {
    if (spin < kSpinBeforeYield) {
      TERN_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  TERN_CHECK(grain > 0);
  const int64_t units = (n + grain - 1) / grain;
  if (units <= 1 || n_threads_ == 1) {
    if (n > 0) fn(0, n);
    return;
  }
  const int nt = static_cast<int>(std::min<int64_t>(n_threads_, units));
  run([&](int t) {
    if (t >= nt) return;
    const int64_t u0 = units * t / nt, u1 = units * (t + 1) / nt;
    const int64_t b = u0 * grain, e = std::min(n, u1 * grain);
    if (b < e) fn(b, e);
  });
}

}  // namespace tern
