// gpu_bench --attn: the attention op alone at the Llama-3-8B shape (32 q heads, 8 KV heads,
// head_dim 128, f16 KV in 16-token blocks; --attn-shape Q/KV/D another, e.g. 9/3/64 SmolLM2), 32 layers of distinct KV buffers per step so no
// layer finds its KV in L2, timed per step of 32 calls (CUDA graph replay, one small sync):
//   decode   one token after C cached tokens (the batch-invariant kernel, split mode): us per
//            layer, KV bytes per token, GB/s and % of the copy bandwidth; with --attn-batch B > 1
//            one token of each of B sequences at C cached tokens (their own blocks)
//   decode+rope  the same step with each layer's rope of q and k and K/V write recorded before its
//            attention, as models do (the fused decode takes them into its launch: ", fused")
//   prefill  P tokens on top of C cached tokens (with --tc-prefill the tensor-core kernel,
//            else the batch-invariant one): ms per layer, ms for 32 layers, TFLOP/s
// --attn-env "A=1,B=2;;C=0" runs everything once per ';'-separated variant, each with its
// variables set while its backend is created (an empty variant: the environment as given), so
// settings read at backend creation (TERN_CUDA_ATTN_CHUNK_SPLIT, TERN_CUDA_ATTN_MERGE_SLICES, ...)
// are compared in one process; --attn-rounds 2 runs the variants again in reverse order.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tern::bench {

struct AttentionBenchOptions {
  std::vector<int> decode_ctx = {1024, 32768};
  std::vector<std::pair<int, int>> prefill = {{0, 512}, {0, 4096}, {30720, 2048}};  // (cached, new)
  bool tc = false;
  int reps = 10;                                                                     // --attn-reps
  std::vector<int> batch = {1};                                                      // --attn-batch
  std::vector<std::string> env_variants = {""};                                      // --attn-env
  int rounds = 1;                                                                    // --attn-rounds
  int n_heads = 32, n_kv_heads = 8, head_dim = 128;  // --attn-shape 32/8/128
};

// Returns the process exit code.
int run_attention_bench(const AttentionBenchOptions& o);

}  // namespace tern::bench
