// The CUDA backend: weights, activations and the paged KV pool live in device memory, every op
// runs as a kernel on one stream, and the host syncs only in copy_to_host.
//
// Steps are recorded, then replayed. Ops called between begin_step and the next sync point
// (copy_to_host, copy_from_host, a Buffer freed, the next begin_step) are appended to a list of
// launch records instead of being launched at once; at the sync point the list runs. When a
// list is byte-identical to one seen before (a decode step: same shapes, same buffers; the plan's
// contents live in a device buffer uploaded by begin_step) it runs as a CUDA graph: one launch
// for the whole forward instead of one per op.
//
// Batch invariance: a row's result never depends on how many rows share the step. Every kernel
// reduces in an order fixed by the tensor shapes (never by n), matmul uses one kernel family for
// all n, and attention splits the context at fixed 64-position chunks merged in chunk order
// (gemv.h and attention.h give the exact orders).
//
// This header includes no CUDA headers; only src/backends/cuda/ does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "ops/backend.h"

namespace tern::cuda {

// How attention spreads work (attention.h); both modes give bit-identical results.
enum class AttentionSplit : uint8_t {
  kAuto,    // split the context across blocks when the tiles alone cannot fill the GPU
  kAlways,  // tests: always the split (flash-decoding) path
  kNever,   // tests: always one block per tile
};

struct CudaBackendOptions {
  int device = 0;           // CUDA device ordinal
  bool use_graphs = true;   // replay repeated steps as CUDA graphs (off: launch every op eagerly)
  AttentionSplit attention_split = AttentionSplit::kAuto;
  // Programmatic dependent launch on sm_90+: each kernel starts while its predecessor finishes
  // (launch.cuh). Identical results; off, or TERN_CUDA_PDL=0, for A/B timing.
  bool programmatic_launch = true;
  // Tensor-core prefill (matmul_tc.h): products with at least tc_prefill_min_tokens activation
  // rows run as bf16 cuBLASLt GEMMs (fp32 accumulation) on weights dequantized to bf16. Much
  // faster prefill, but those rows are neither bit-identical to decode nor batch-invariant
  // (matmul_tc.h gives the error bound). Off by default; the environment variable
  // TERN_CUDA_TC_PREFILL overrides this flag (1: on, 0: off). Needs libcublasLt at run time.
  bool tc_prefill = false;
  int tc_prefill_min_tokens = 64;  // activation rows from which a product takes the tensor cores
  // With tc_prefill: steps of at least tc_prefill_min_tokens tokens also run attention on the
  // tensor cores (attention_tc.h: f16 q and p, not bit-identical to decode). The environment
  // variable TERN_CUDA_TC_ATTENTION (1 / 0) overrides this flag.
  bool tc_attention = true;
  // GEMV kernels (gemv.h): false = the default kernels (bulk-copy staging on sm_90, single-row
  // tiles at n = 1, several short rows per warp step); true = the previous launch shapes, for A/B
  // timing. Same bits either way. TERN_CUDA_GEMV=legacy / =default overrides it;
  // TERN_CUDA_GEMV_STAGE_BYTES sets the bulk pipelines' bytes per warp (benchmark sweeps).
  bool legacy_gemv = false;
  // The n = 1 multi-row / split-row GEMV (gemv_rows.cu) for long quantized rows; same bits. By
  // default it takes the products where it measured faster (gemv_rows_default: q4_k / q6_k /
  // q8_0 products of up to 64k rows); rows_gemv (TERN_CUDA_GEMV=rows) sends it every product it
  // takes, single_gemv (TERN_CUDA_GEMV=single) none (the previous default, A/B timing).
  // gemv_rows_per_step (1 / 2 / 4) and gemv_parts_per_row (1 / 2 / 4) fix its shape instead of
  // the per-shape choice (0), as do TERN_CUDA_GEMV_ROWS / TERN_CUDA_GEMV_PARTS (tests, sweeps).
  bool rows_gemv = false;
  bool single_gemv = false;
  // The n = 1 register-streamed quantized GEMV (gemv_stream.cu) for every product it takes
  // (TERN_CUDA_GEMV=stream); by default it takes those of gemv_stream_default. Same bits.
  bool stream_gemv = false;
  // Its blocks per SM (MatmulArgs::gemv_stream_blocks: 1 or 2, 0 per type; same bits);
  // TERN_CUDA_GEMV_STREAM_BLOCKS overrides it.
  int gemv_stream_blocks = 0;
  int gemv_rows_per_step = 0;
  int gemv_parts_per_row = 0;
  // Split-mode attention kernel, same bits for all (attention.h): 0 = chunk kernel, 1 = span
  // kernel, 2 = two-chunk span kernel, 3 = two-chunk kernel with GQA-group values, plus the flags
  // of attention_span.cuh (16 heads-first order, 32 persistent blocks, 64 two value dimensions
  // per lane); -1 = TERN_CUDA_ATTN_SPAN or else per shape (115 at head dim 128 with an f16 cache,
  // else 2; cuda_backend.cpp default_span_kernel).
  int attention_span_kernel = -1;
  // Span kernels: the last span block of each tile merges the tile's partials itself instead of
  // a separate merge kernel (attention_span_merge.cuh; same bits). 0 = never, 1 = where measured
  // faster (tiles of one span: contexts up to 256), 2 = always (tests, A/B);
  // -1 = TERN_CUDA_ATTN_FOLD_MERGE (0 / 1 / 2) or else 1.
  int attention_fold_merge = -1;
  // Chunk split of the two-chunk span kernels (attention.h; same bits): 1 or 2 K/V chunks per
  // block with a record per chunk and the chunk merge, 0 = one block per span; -1 =
  // TERN_CUDA_ATTN_CHUNK_SPLIT (0 / 1 / 2) or else, with the default kernel only, per plan
  // (backend_settings.cpp default_chunk_split: short contexts, where spans x KV heads are few;
  // with the warp-specialized ring below 8 spans per tile).
  int attention_chunk_split = -1;
  // Two-chunk span kernels: copy a block's first K/V chunks before the PDL wait, overlapping the
  // kernel before (rows no token of the step writes; attention.h early_kv; same bytes, same bits)
  // in steps of at most 16 tokens. 0 = off, 1 = on; -1 = TERN_CUDA_ATTN_EARLY_KV (0 / 1) or else off
  // (measured slower whole-model on the H200, bench/RESULTS.md).
  int attention_early_kv = -1;
  // Fused decode (the rope in the chunk-split launch): work a block does before its PDL wait
  // (attention.h "early K/V copies with the fused rope"; same bytes, same bits). The kernel before
  // is the q/k/v projection, which writes no cache row, and the step's own rows are computed in
  // the launch, so no copied row is deferred. 0 = none, 1 = the first K/V chunks' copies, 2 =
  // those and the rope's rotation factors; -1 = TERN_CUDA_ATTN_FUSED_EARLY_KV (0 / 1 / 2) or else
  // backend_settings.h kDefaultFusedEarlyKv (2: measured faster whole-model on the H200).
  int attention_fused_early_kv = -1;
  // The default kernel at head dim 128 with an f16 cache (attention.h; same bits): 0 = 115, 1 =
  // 243 (115 + 128, the split K/V ring: a stage's K half reissued after the scores step, its V
  // half after the values step), 2 = 499 (243 + 256: the values step on all 8 warps, 2 queries
  // per lane), 3 = 755 (243 + 512: the warp-specialized ring, producer warps scoring step s + 1
  // while consumer warps run step s), 4 = 1779 (755 + 1024: its lean form, the same steps with
  // fewer instructions around them), 5 = 1779 with the span merge sliced by 32 dimensions (the
  // default in sessions 9-11), 6 = 5 with the merge's fold products formed ahead of its serial
  // fold (the default since session 12); -1 = TERN_CUDA_ATTN_SPLIT_RING (0-6) or else
  // backend_settings.cpp's default (kDefaultSplitRing).
  int attention_split_ring = -1;
  // Fused decode (attention.h; same bits): in steps of one token per sequence whose attention
  // takes the chunk split, the layer's rope of q and k and its K/V write (one rope launch) run
  // inside the attention launch. 0 = off, 3 = on (the default; the numbering keeps the values of
  // the modes that also merged in the last block, removed in session 10); -1 =
  // TERN_CUDA_ATTN_FUSED (0 / 3) or else backend_settings.cpp's default (3).
  int attention_fused_decode = -1;
  // Compact decode (attention.h; same bits): a chunk-split attention in a step of one token per
  // sequence (f16 cache, head_dim 64 / 128, GQA groups up to 4) runs the compact per-chunk kernel
  // (attention_compact.cu) and the chunk merge kernel; 0 = off, 1 = on with the rope as its own
  // launch, 2 = on with the rope launch taken in (rotated q, the step's K/V row computed and
  // written by the block that holds it), 3 = 2 at head_dim <= 64 and 1 above (faster on the H200);
  // -1 = TERN_CUDA_ATTN_COMPACT (0-3) or else
  // backend_settings.h kDefaultAttnCompact.
  int attention_compact = -1;
  // Register-tiled attention (attention_tiled.h; same bits as attention.h's kernels): steps of at
  // least this many tokens (prefill chunks, appends) take it where it supports the shape.
  // 0 = TERN_CUDA_ATTN_TILED (N; 0 never) or else backend_settings.h kDefaultAttnTiledMin;
  // negative = never.
  int attention_tiled_min_tokens = 0;
  // Fold the small ops around a GEMV into its launch (kernels.h GemvFusion; not on GemvPath kLegacy):
  // an RMSNorm or SwiGLU producing its activations, and the residual add of its output. Same
  // bits as the separate ops; false, or TERN_CUDA_FUSE=0, keeps them separate (A/B, tests).
  // fuse_swiglu adds the SwiGLU prologue (n <= 4). Off by default: every block of the down
  // projection then evaluates silu over the whole row (an exp and a division per element, 14336
  // per block at 8B) and one block stores the result at the end, which cost more than the
  // elementwise launch it saves (H200, 8B Q4_K_M decode: 299 tok/s without it, 280 with it,
  // 269 unfused). TERN_CUDA_FUSE=swiglu turns it on, =noswiglu off.
  // fuse_swiglu_epilogue instead folds the SwiGLU into the gate/up launch (a warp computes gate
  // row r and up row r and stores silu(g) * u; gemv_quant.cu, gemv_rows.cu): no repeated work.
  // On by default (H200, 8B decode at 1k: Q4_K_M 330.3 -> 343.0 tok/s, Q8_0 292.4 -> 295.4; on
  // the single-row kernels too: SmolLM2 Q4_1 without it on q4_1 launches decoded 1022.9 against
  // 1062.7 tok/s at ctx 128 and prefilled 512 tokens at 28,755 against 30,573, session 5);
  // off where fuse_swiglu takes the prologue instead. TERN_CUDA_FUSE=noswiglu turns both off.
  bool fuse_gemv = true;
  bool fuse_swiglu = false;
  bool fuse_swiglu_epilogue = true;
  // F32 / F16 / BF16 products at n = 1 (gemv.h): false = the register-streamed kernel
  // (gemv_float_stream.cu, fusions in-kernel), true = the previous float kernels; same bits
  // either way. TERN_CUDA_GEMV_FLOAT=prev / =stream overrides it. float_gemv_rows x
  // float_gemv_unroll (1 x 8, 1 x 16, 2 x 4, 2 x 8, 4 x 4; TERN_CUDA_GEMV_FLOAT_SHAPE=RxU) fix the
  // streamed kernel's rows per warp and chunks per load batch instead of the per-shape choice (0),
  // float_gemv_blocks (TERN_CUDA_GEMV_FLOAT_BLOCKS) caps its blocks per SM (tests, sweeps).
  // float_gemv_dynamic: its warps claim units from a counter as they finish instead of walking a
  // fixed stride (TERN_CUDA_GEMV_FLOAT_DYNAMIC=1 / 0). Off: slower on the H200 (8B F16 decode
  // 200.8 against 211.2 tok/s; gate+up 64.5 against 59.6 us: a claim is an atomic round trip).
  bool previous_float_gemv = false;
  bool float_gemv_dynamic = false;
  int float_gemv_rows = 0;
  int float_gemv_unroll = 0;
  int float_gemv_blocks = 0;
  // The streamed float kernel's two-buffer variant (MatmulArgs::gemv_float_pipe; same bits): 0 =
  // the default, 1 = on, 2 = off; TERN_CUDA_GEMV_FLOAT_PIPE=1 / 0 overrides it. The quantized
  // kernels' norm-weight preload before the PDL wait (MatmulArgs::gemv_norm_preload; same bits),
  // likewise; TERN_CUDA_GEMV_NORM_PRELOAD=1 / 0. It also picks gemv_quant.cu's early-load
  // single-row instances (norm weight before the wait, the residual right after it) for products
  // of at most one block per SM (SmolLM2's: 1.5% faster decode on the H200).
  int float_gemv_pipe = 0;
  int gemv_norm_preload = 0;
  // Mixed-type launches (MatmulArgs::tail_mat; gemv_rows.cu, sm_90, one activation row): a q6_k
  // product of the same activations right after a q4_k launch (Q4_K_M's v after q+k) joins it,
  // so one kernel reads both and forms the RMSNorm prologue's tile once (H200, 8B Q4_K_M decode
  // at 1k: 376.7 -> 389.4 tok/s, bench/RESULTS.md session 7). 0 = the default (on), 1 = on, 2 =
  // off; TERN_CUDA_GEMV_MIXED=1 / 0 overrides it. Same bits in every setting.
  int gemv_mixed = 0;
  // The SwiGLU epilogue for float gate/up products that the streamed kernel takes (a warp's two
  // rows are gate row r and up row r), with fuse_gemv; TERN_CUDA_GEMV_FLOAT_GLU=0 / 1 overrides.
  // On: it saves the elementwise launch without repeating work (H200, 8B F16 decode with the first
  // version of the kernel: 168.8 tok/s with it, 161.1 without).
  bool fuse_float_swiglu_epilogue = true;
  // Precision of the activations that meet quantized weights (gemv_items.cuh; float weights
  // always see float activations): 16 (int16 per element, ~2^-15 of a 32-element unit's largest
  // value: the CPU backend's default precision, so greedy tokens follow the CPU's) or 8 (int8,
  // llama.cpp's precision: fewer instructions per weight, logits of SmolLM2-135M Q4_1 off by up
  // to ~0.8). 0 = the default (16). TERN_CUDA_ACT_BITS=8 / 16 overrides it. Fixed per backend:
  // a row's arithmetic must not depend on the batch it is in.
  int act_bits = 0;
  // Quantized products with at least this many activation rows (prefill chunks, large batches)
  // take the tensor-core kernel (matmul_qmma.h), whose rows equal the GEMV's bit for bit; fewer
  // stay on the GEMV. 0 = the defaults (backend_settings.h: 24 rows, 64 for weights under 4 MiB),
  // negative = never. TERN_CUDA_QMMA_MIN=N overrides it (0: never).
  int qmma_min_tokens = 0;
  // Attention on the tensor cores with its own batch-invariance contract (attention_mma.h): every
  // attention of an f16 cache at head_dim 64 / 128 takes it, prefill and decode alike, so rows
  // stay bit-identical across steps (not to the default kernels' bits: another summation order,
  // close to f32). 0 = the default (off), 1 = on, 2 = off; TERN_CUDA_ATTN_MMA=1 / 0 overrides it.
  // Tests: 3 = on in its split mode only, 4 = in its fused mode only (the same bits as 1).
  int attention_mma = 0;
  // Tests: caps the shared memory per block the GEMV kernels plan with (0: the device's), so that
  // an H200 runs the launch shapes of a smaller device (an A100's 163 KiB, an RTX 4090's 99).
  int gemv_smem_cap = 0;
};

// Number of CUDA devices this process can use (0 without a driver or a GPU).
int device_count();

// A backend on `options.device`. Error naming the device when there is none or it cannot start.
Result<std::unique_ptr<Backend>> create_backend(const CudaBackendOptions& options = {});

// Counters of one backend, for tests and benchmarks. Precondition: backend came from
// create_backend.
struct CudaBackendStats {
  int64_t steps_eager = 0;       // op lists launched op by op
  int64_t steps_graph = 0;       // op lists replayed from a cached graph
  int64_t graphs_built = 0;      // graphs captured and instantiated (or updated)
  int64_t tc_matmuls = 0;        // products recorded for the tensor-core prefill path
  int64_t tc_attentions = 0;     // attention ops recorded for the tensor-core prefill kernel
  int64_t folded_merges = 0;     // split attention ops whose span blocks merged (no merge kernel)
  int64_t chunk_splits = 0;      // split attention ops run with the chunk split (attention.h)
  int64_t fused_kv_writes = 0;   // kv_write ops that joined the preceding rope's launch
  int64_t fused_attentions = 0;  // attention ops that took their rope launch and merge in (fused decode)
  int64_t compact_attentions = 0;  // chunk-split attention ops run by the compact kernel
  int64_t tiled_attentions = 0;    // attention ops run by the register-tiled kernel (attention_tiled.h)
  int64_t tiled_split_attentions = 0;  // ... of those, in its split mode (span records and the merge)
  int64_t fused_early_kv = 0;  // fused decode attention ops that copied K/V before the PDL wait
  int64_t gemv_fusions = 0;      // ops folded into a GEMV launch (prologues and residual adds)
  int64_t gemv_mixed = 0;        // products that joined a launch of another weight type (gemv_mixed)
  int act_bits = 16;             // CudaBackendOptions::act_bits as resolved (8 or 16)
  int qmma_min_tokens = 0;       // CudaBackendOptions::qmma_min_tokens as resolved (0: never)
  int64_t qmma_matmuls = 0;      // products recorded with the tensor-core scratch (matmul_qmma.h)
  int64_t mma_attentions = 0;    // attention ops recorded for the invariant tensor-core kernel (attention_mma.h)
  int64_t mma_split_attentions = 0;  // ... of those, in its split mode (span partials and a merge)
  int gemv_path = 0;             // the GEMV family its products take (kernels.h GemvPath:
                                 // 0 default, 1 legacy, 2 multi-row / split-row, 3 single-row,
                                 // 4 register-streamed, 5 default before it)
};
CudaBackendStats backend_stats(const Backend& backend);
// Sets the small-GEMV switches of a CUDA backend from now on (A/B timing in one process; every
// setting gives the same bits): CudaBackendOptions::float_gemv_pipe and gemv_norm_preload values
// (0 default, 1 on, 2 off).
void set_small_gemv(Backend& backend, int float_pipe, int norm_preload);
// Sets the GEMV family of a CUDA backend from now on (kernels.h GemvPath: 0 default, 2 rows, 3
// single, 4 stream, 5 prev; A/B timing in one process, same bits). A legacy backend stays legacy, and
// none is switched to legacy (its sm_90 kernels may be missing, its fusions were chosen).
void set_gemv_path(Backend& backend, int path);
// Sets the default long-decode attention form of a CUDA backend from now on
// (CudaBackendOptions::attention_split_ring, 0-6; A/B timing in one process, same bits).
void set_attention_split_ring(Backend& backend, int split_ring);
// Sets the quantized activations' precision of a CUDA backend from now on (8 or 16;
// CudaBackendOptions::act_bits), for A/B timing in one process only: unlike the setters above it
// changes results, and a KV cache filled before holds the other precision's values.
void set_act_bits(Backend& backend, int bits);

// What benchmarks report next to their timings.
struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  size_t memory_bytes = 0;
  size_t l2_bytes = 0;
  int cc_major = 0;  // compute capability, major version
};
Result<DeviceInfo> device_info(int device = 0);
// Device-to-device copy bandwidth in GB/s (bytes read plus bytes written, per second), the
// median of `reps` copies of a `bytes` buffer: the ceiling for memory-bound kernels.
Result<double> copy_bandwidth_gbs(int device, size_t bytes, int reps = 20);
// Dense bf16 tensor-core rate in TFLOP/s: the median of `reps` cuBLASLt GEMMs of n x n x n
// (bf16 inputs filled with pseudo-random values, fp32 accumulation and output: the GEMM the
// tensor-core prefill runs), 2 n^3 FLOPs each: the ceiling for compute-bound prefill. Error when
// cuBLASLt does not load or the buffers do not fit.
Result<double> bf16_gemm_tflops(int device, int64_t n = 8192, int reps = 10);

}  // namespace tern::cuda
