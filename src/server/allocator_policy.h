// The server's memory policy for glibc malloc.
//
// Measured (issue 6, tests/server_py/test_load.py: rounds of 16 concurrent streaming clients,
// SmolLM2-135M, --kv-mem 24M): the live heap returns to the same size after every round (heaptrack:
// +5 KiB per round, nothing leaked at exit), yet RSS grew by 2-18 MiB per round. The cause is
// glibc's dynamic mmap threshold: the first time a large mmapped block is freed (a connection
// thread's 1 MiB tokenizer word cache at thread exit, a grown workspace), glibc raises the
// threshold to that block's size, so from then on such blocks come from the malloc arenas of
// short-lived connection threads, where they fragment and are never given back. With the
// threshold pinned (which also turns off the dynamic adjustment), the same rounds hold RSS flat
// (+8 KiB per round, six rounds) and ~50 MiB lower; MALLOC_ARENA_MAX=1 alone did not help.
#pragma once

namespace tern::server {

// Pins malloc's mmap threshold (and with it the trim threshold) for a long-running server. Call
// it first thing, before the model loads: applied only once the server is up (after startup's
// large temporaries had already raised the threshold) RSS still grew 6 MiB in a warm round.
// Idempotent; a no-op where the C library is not glibc.
void apply_serving_allocator_policy();

}  // namespace tern::server
