// L2 prefetch of upcoming weights (docs/ARCHITECTURE.md, CUDA contract): a decode step's HBM is
// nearly idle while the latency-bound kernels between the q/k/v and the o products run (rope and
// the KV write, decode attention). A small kernel placed right before the attention asks the L2
// to fetch the weights of the GEMV launches that follow (the o projection, then the first bytes
// of each gate / up matrix), so those launches find their first rows in L2 instead of waiting on
// HBM. A pure hint: it reads nothing into registers and writes nothing, so results are unchanged.
//
// The backend pushes an L2PrefetchArgs record with its budget (room, second_bytes); when the
// step's records are final (StepQueue::flush) resolve_l2_prefetches fills the ranges from the
// MatmulArgs records that follow it.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cuda/kernels.h"

namespace tern::cuda {

struct L2PrefetchArgs {
  static constexpr int kMaxRanges = 6;
  int n_ranges;  // set by resolve_l2_prefetches
  int n_sm;      // grid sizing
  int evict_last;  // 1: the lines get the L2 evict_last priority (streamed weights then evict them last)
  // How the kernel asks (A/B): 0 = bulk prefetches of 16 KB, one per thread of 32-thread blocks,
  // as many blocks as that needs (at most one per SM); 1 = bulk prefetches spread evenly over
  // every SM (a block per SM, each thread one 16-byte aligned share); 2 / 3 = per-thread
  // prefetch.global.L2 of every 128th / 32nd byte on every SM (the load path, not the copy
  // engine); 4 = none (the launch alone, to time its cost).
  int issue;
  uint64_t room;          // bytes the prefetch may fill in all (the L2 budget less the attention's K/V)
  uint64_t second_bytes;  // bytes of the second GEMV launch after the record (gate / up), split over its matrices
  const void* ptr[kMaxRanges];
  uint64_t bytes[kMaxRanges];
};

// Fills the ranges of the prefetch records from the GEMV launch records after each: the first
// launch (o) whole, then the first second_bytes / n_mats of each matrix of the second launch, in
// that order, within room bytes (16-byte aligned starts and lengths). The search skips the
// attention and the small ops between them and stops at a tensor-core product, a rope or kv_write
// (the next layer), another prefetch, or the end of the list. Defined in step_queue.cpp.
struct OpRecord;
void resolve_l2_prefetches(std::vector<OpRecord>& ops);

// Issues the prefetches (sm_90: cp.async.bulk.prefetch.L2; earlier GPUs: nothing), then waits for
// the predecessor (PDL) before it exits. No launch when n_ranges == 0.
void launch_l2_prefetch(const L2PrefetchArgs& a, const LaunchEnv& env);

}  // namespace tern::cuda
