#include "server/allocator_policy.h"

#include <cstddef>  // note: defines __GLIBC__ (via <features.h>), which the check below needs

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tern::server {

namespace {
// Blocks of this size and above are mmapped, and munmapped (returned to the system) when freed;
// setting it explicitly is what stops glibc from raising it. 512 KiB rather than glibc's initial
// 128 KiB keeps the sampler's per-token vocabulary-sized buffers (4 x 49152 x 4 B for SmolLM2)
// on the heap instead of paying an mmap/munmap and page faults per token; both hold RSS flat in
// the load test (+16 KiB per round at 128 KiB, +8 KiB at 512 KiB).
constexpr int kMmapThresholdBytes = 512 * 1024;
}  // namespace

void apply_serving_allocator_policy() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
#endif
}

}  // namespace tern::server
