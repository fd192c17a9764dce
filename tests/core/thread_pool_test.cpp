// ThreadPool: run() calls every thread index exactly once; run_dynamic() finishes shared work with
// whichever threads join, never runs a closed job, and interleaves safely with run() (a late
// worker must not run a finished job's function or count itself into the next one).
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace tern {
namespace {

TEST(ThreadPool, RunCallsEveryIndexOnce) {
  for (int n : {1, 2, 3}) {
    ThreadPool pool(n);
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<std::atomic<int>> calls(n);
      pool.run([&](int t) { calls[t].fetch_add(1); });
      for (int t = 0; t < n; ++t) ASSERT_EQ(calls[t].load(), 1) << "threads " << n << " index " << t;
    }
  }
}

// Work items claimed from a counter: every item done exactly once, by distinct thread indices
// at a time, alternating with run() jobs that must still reach every thread.
TEST(ThreadPool, RunDynamicFinishesSharedWorkAndInterleavesWithRun) {
  for (int n : {1, 2, 3}) {
    ThreadPool pool(n);
    for (int rep = 0; rep < 2000; ++rep) {
      const int n_items = rep % 7 == 0 ? 1 : 64;
      std::vector<std::atomic<int>> done(n_items);
      std::atomic<int> next{0};
      std::vector<std::atomic<int>> inside(n);
      pool.run_dynamic([&](int t) {
        ASSERT_EQ(inside[t].fetch_add(1), 0) << "index " << t << " ran twice at once";
        for (int i = next.fetch_add(1); i < n_items; i = next.fetch_add(1)) done[i].fetch_add(1);
        inside[t].fetch_sub(1);
      });
      for (int i = 0; i < n_items; ++i) ASSERT_EQ(done[i].load(), 1) << "threads " << n << " item " << i;
      if (rep % 3 == 0) {
        std::vector<std::atomic<int>> calls(n);
        pool.run([&](int t) { calls[t].fetch_add(1); });
        for (int t = 0; t < n; ++t) ASSERT_EQ(calls[t].load(), 1) << "run() after run_dynamic, index " << t;
      }
    }
  }
}

TEST(ThreadPool, ParallelForCoversTheRangeOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 5, 100, 1001}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
  }
}

}  // namespace
}  // namespace tern
