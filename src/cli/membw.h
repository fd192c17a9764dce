// Memory read bandwidth of this machine, measured the way a decode step reads weights: threads
// stream disjoint slices of a buffer far larger than the last-level cache with wide loads.
// It is the "speed of light" that `tern bench` compares decode weight traffic against.
#pragma once

#include <cstddef>

namespace tern::cli {

struct MemBandwidthOptions {
  size_t buffer_bytes = size_t{1} << 30;  // should be several times the last-level cache
  int n_passes = 5;                       // timed passes; the best one is reported
  // Time a pass by the slowest thread's CPU time instead of wall time: on a machine shared with
  // other work, descheduled periods then do not count as slow memory.
  bool cpu_time = false;
};

// Best read bandwidth over the passes, in GB/s (1e9 bytes per second), with n_threads threads
// (the caller counts as one). Allocates and first touches the buffer on each call.
double measure_read_bandwidth_gbs(int n_threads, const MemBandwidthOptions& options = {});

}  // namespace tern::cli
