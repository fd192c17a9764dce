// What a CudaBackend runs with: its CudaBackendOptions, overridden by the TERN_CUDA_* environment
// variables (A/B timing and tests without recompiling) and limited by the device, resolved once
// when the backend is created. Host logic only (no device calls), so it is unit-tested without a
// GPU (tests/gpu/backend_settings_test.cpp, which CI runs).
#pragma once

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels.h"
#include "core/dtype.h"

namespace tern::cuda {

// default_span_kernel's form at head dim 128 with an f16 cache (CudaBackendOptions::attention_split_ring).
// 6 since session 12 (50931: the sliced span merge with its prescaled fold; 5 before, the serial
// fold, from session 9; 4 before that).
constexpr int kDefaultSplitRing = 6;
// The largest split-ring form (default_span_kernel; 6: the prescaled merge fold).
constexpr int kMaxSplitRing = 6;

// The fused decode attention's work before its PDL wait when neither the option nor
// TERN_CUDA_ATTN_FUSED_EARLY_KV sets it (CudaBackendOptions::attention_fused_early_kv): 0 none,
// 1 the first K/V copies, 2 those and the rope's rotation factors. 2: on the H200 (session 7,
// bench/RESULTS.md) 8B attention+rope at 1k 14.8 -> 13.0 us/layer, 8B Q4_K_M decode at 1k
// 380 -> 395 tok/s, SmolLM2 Q4_1 +2-3%.
constexpr int kDefaultFusedEarlyKv = 2;

// The fused decode attention's default (CudaBackendOptions::attention_fused_decode values): 3, the
// rope taken in. On the H200 (bench/RESULTS.md, session 6) it took a decode layer's rope +
// attention from 16.6 to 14.9 us at 1k (8B shape; SmolLM2's 13.2 -> 10.7) and SmolLM2 Q4_1 from
// 1,061 to 1,106 tok/s at ctx 128, 8B Q4_K_M unchanged (355 / 354). (The merge by the last block,
// modes 1, 2 and 4, measured slower everywhere and was removed in session 10.)
constexpr int kDefaultFusedDecode = 3;

// The compact decode attention's default (CudaBackendOptions::attention_compact: 0 off, 1 on
// with the rope launch kept, 2 on with the rope taken into it, 3 on with the rope taken in at
// head_dim <= 64 only). 3 since session 8, from the H200's A/B (bench/RESULTS.md): SmolLM2 Q4_1
// (head_dim 64) decodes fastest with the rope taken in (1,336 tok/s at ctx 128 against 1,290 with
// it apart and 1,170 without the kernel), the 8B shape (head_dim 128) with it apart (437 against
// 423 and 405 tok/s at 1k).
constexpr int kDefaultAttnCompact = 3;

// Steps of at least this many tokens take the register-tiled attention by default
// (CudaBackendOptions::attention_tiled_min_tokens, attention_tiled.h); 0: never. Same bits
// either way. Off (opt-in, TERN_CUDA_ATTN_TILED=32) until its tests have run on a device.
constexpr int kDefaultAttnTiledMin = 0;

// Quantized activations' default precision (CudaBackendOptions::act_bits): 16, the CPU backend's.
constexpr int kDefaultActBits = 16;

// Activation rows from which a quantized product takes the tensor-core kernel by default
// (CudaBackendOptions::qmma_min_tokens = 0, matmul_qmma.h). Same bits either way: a speed choice.
// Its step time is about one 32-token tile's up to 32 rows plus a quantize launch, the GEMV's
// grows with n. On the H200 (bench/RESULTS.md, session 14), decode steps of 8 / 16 / 24 / 32 / 64
// sequences at ctx 1k took, GEMV against tensor cores, 12.8 / 22.0 / 31.2 / 40.1 against 17.8 /
// 18.7 / 19.2 / 19.9 ms on the 8B Q4_K_M shape (weights of 2.4-66 MB per product), and 1.62 /
// 2.34 / - / 3.51 / 6.15 against 2.71 / 3.34 / - / 4.00 / 5.29 ms on SmolLM2 Q4_1 (0.07-1.1 MB:
// the extra launch and a few blocks per product weigh more); every prefill chunk was faster on
// the tensor cores. So weights of at least kQmmaLargeWeightBytes take it from 24 rows, smaller
// ones from 64. An explicit qmma_min_tokens applies to every product.
constexpr int kDefaultQmmaMinTokens = 24;
constexpr int kDefaultQmmaMinTokensSmall = 64;
constexpr int64_t kQmmaLargeWeightBytes = int64_t{4} << 20;

struct BackendSettings {
  bool pdl = false;            // programmatic dependent launch (sm_90+; TERN_CUDA_PDL=0 off)
  bool tc_prefill = false;     // tensor-core prefill (TERN_CUDA_TC_PREFILL=1 / 0)
  bool tc_attention = false;   // its attention kernel too, when tc_prefill (TERN_CUDA_TC_ATTENTION)
  bool attention_row_copy = false;  // TERN_CUDA_ATTN_ROW_COPY=1
  int attention_tc_variant = 0;     // TERN_CUDA_ATTN_TC_VARIANT (attention_tc.h)
  GemvPath gemv_path = GemvPath::kAuto;  // TERN_CUDA_GEMV=legacy / default / rows / single / stream / prev
  int gemv_stage_bytes = 0;         // TERN_CUDA_GEMV_STAGE_BYTES (0: the kernels' default)
  int gemv_rows_per_step = 0;       // TERN_CUDA_GEMV_ROWS
  int gemv_parts_per_row = 0;       // TERN_CUDA_GEMV_PARTS
  int attention_span = -1;          // split-mode kernel, TERN_CUDA_ATTN_SPAN; -1: default_span_kernel
  int attention_span_stages = 3;    // TERN_CUDA_ATTN_SPAN_STAGES (1-4)
  int attention_fold_merge = 1;     // 0 never, 1 where faster, 2 always (TERN_CUDA_ATTN_FOLD_MERGE)
  int attention_fold_max_spans = 1; // TERN_CUDA_ATTN_FOLD_MAX_SPANS
  int attention_chunk_split = -1;   // TERN_CUDA_ATTN_CHUNK_SPLIT (0 / 1 / 2); -1: default_chunk_split
  bool attention_early_kv = false;  // TERN_CUDA_ATTN_EARLY_KV (0 / 1)
  int attention_fused_early_kv = kDefaultFusedEarlyKv;  // TERN_CUDA_ATTN_FUSED_EARLY_KV (0-2)
  int attention_split_ring = kDefaultSplitRing;  // TERN_CUDA_ATTN_SPLIT_RING (0-6): default_span_kernel
  // TERN_CUDA_ATTN_FUSED (0 / 3) as AttentionArgs::fused flags (kAttnFusedRope)
  int attention_fused_decode = kAttnFusedRope;
  int attention_compact = kDefaultAttnCompact;  // TERN_CUDA_ATTN_COMPACT (0-2): attention_compact.cu
  int attention_tiled_min_tokens = kDefaultAttnTiledMin;  // TERN_CUDA_ATTN_TILED=N (0: never)
  bool fuse_gemv = false;           // GEMV fusion, not on GemvPath::kLegacy (TERN_CUDA_FUSE=0 off)
  bool fuse_swiglu = false;         // its SwiGLU prologue (TERN_CUDA_FUSE=swiglu / noswiglu)
  bool fuse_swiglu_epilogue = false;  // its SwiGLU epilogue (TERN_CUDA_FUSE=swiglu-epilogue)
  int gemv_float_kernel = 0;        // 1: previous float kernels (TERN_CUDA_GEMV_FLOAT=prev / stream)
  int gemv_float_rows = 0;          // TERN_CUDA_GEMV_FLOAT_SHAPE=RxU (0: per shape)
  int gemv_float_unroll = 0;
  int gemv_float_blocks = 0;        // TERN_CUDA_GEMV_FLOAT_BLOCKS (0: as many as fit)
  bool gemv_float_dynamic = false;  // TERN_CUDA_GEMV_FLOAT_DYNAMIC=1 / 0
  int gemv_float_pipe = 0;          // 0 default, 1 on, 2 off (TERN_CUDA_GEMV_FLOAT_PIPE=1 / 0)
  int gemv_norm_preload = 0;        // 0 default, 1 on, 2 off (TERN_CUDA_GEMV_NORM_PRELOAD=1 / 0)
  int gemv_stream_blocks = 0;       // TERN_CUDA_GEMV_STREAM_BLOCKS=1 / 2 (0: per type)
  // Q4_K_M's q6_k v joins its q4_k q+k launch (one multi-row kernel, MatmulArgs::tail_mat): 0
  // default (on), 1 on, 2 off (TERN_CUDA_GEMV_MIXED=1 / 0).
  int gemv_mixed = 0;
  bool fuse_float_swiglu_epilogue = false;  // with fuse_gemv (TERN_CUDA_GEMV_FLOAT_GLU=0 / 1)
  int act_bits = kDefaultActBits;   // 8 or 16 (TERN_CUDA_ACT_BITS=8 / 16): MatmulArgs::x_bits
  int qmma_min_tokens = kDefaultQmmaMinTokens;  // TERN_CUDA_QMMA_MIN=N; 0: never
  int qmma_min_tokens_small = kDefaultQmmaMinTokensSmall;  // the same, for weights under kQmmaLargeWeightBytes
  // The invariant tensor-core attention (attention_mma.h): 0 off, 1 on (mode per plan), 3 on in
  // split mode only, 4 on in fused mode only (tests; TERN_CUDA_ATTN_MMA=1 / 0 overrides 0-2).
  int attention_mma = 0;
  // Its split mode's V tiles in flight (A/B timing, the same bits): 2 or 4
  // (TERN_CUDA_ATTN_MMA_STAGES), 0 per step (attention_mma_v_stages).
  int attention_mma_stages = 0;
};

// cc_major: the device's compute capability; bulk_compiled: gemv_bulk_compiled() (bulk-copy GEMVs
// need sm_90 and kernels compiled for it, not sm_80 code JIT-compiled for a newer GPU).
BackendSettings resolve_settings(const CudaBackendOptions& options, int cc_major, bool bulk_compiled);

// The split-mode attention kernel of a layer shape when neither the option nor the environment
// chooses one; every choice gives the same bits (attention.h).
// split_ring (BackendSettings::attention_split_ring): 0 = 115, 1 = 243, 2 = 499, 3 = 755, 4 = 1779
// where they apply, 5 = 1779 + 16384 (the span merge sliced by 32 dimensions, attention_span.cuh
// kSpanMergeSliced).
int default_span_kernel(int head_dim, DType kv_dtype, int split_ring = kDefaultSplitRing);

// The chunk split (AttentionArgs::chunk_split: K/V chunks per block, 0 = whole spans) of a
// split-mode plan with the default kernel: n_split_items (tile, span) items, the most spans of
// one tile, the plan's last position, span_kernel the kernel whole spans would run
// (default_span_kernel). Every choice gives the same bits (attention.h).
int default_chunk_split(int n_split_items, int max_tile_spans, int max_position, int n_kv_heads, int n_sm,
                        int span_kernel);

// The fused decode's flags (AttentionArgs::fused) of a CudaBackendOptions::attention_fused_decode
// value: 0 none, 3 the rope; others as kDefaultFusedDecode.
int fused_decode_flags(int mode);

}  // namespace tern::cuda
