#include "backends/cuda/backend_settings.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/attention_tc.h"

namespace tern::cuda {
namespace {

// Programmatic dependent launch needs sm_90; TERN_CUDA_PDL=0 turns it off (A/B timing).
bool use_pdl(const CudaBackendOptions& options, int cc_major) {
  const char* env = std::getenv("TERN_CUDA_PDL");
  const bool env_off = env != nullptr && std::strcmp(env, "0") == 0;
  return options.programmatic_launch && !env_off && cc_major >= 9;
}

// The tensor-core prefill switch: TERN_CUDA_TC_PREFILL (1 / 0) overrides the option.
bool use_tc_prefill(const CudaBackendOptions& options) {
  const char* env = std::getenv("TERN_CUDA_TC_PREFILL");
  if (env != nullptr && *env) return std::strcmp(env, "0") != 0;
  return options.tc_prefill;
}

// The tensor-core prefill attention (with tc_prefill): TERN_CUDA_TC_ATTENTION (1 / 0) overrides
// CudaBackendOptions::tc_attention.
bool use_tc_attention(const CudaBackendOptions& options) {
  const char* env = std::getenv("TERN_CUDA_TC_ATTENTION");
  if (env != nullptr && *env) return std::strcmp(env, "0") != 0;
  return options.tc_attention;
}

// GEMV fusion (CudaBackendOptions::fuse_gemv, fuse_swiglu, fuse_swiglu_epilogue):
// TERN_CUDA_FUSE=0 turns it off, =swiglu takes the SwiGLU prologue (instead of the epilogue),
// =swiglu-epilogue the epilogue, =noswiglu neither.
bool use_gemv_fusion(const CudaBackendOptions& options) {
  const char* env = std::getenv("TERN_CUDA_FUSE");
  return options.fuse_gemv && !(env != nullptr && std::strcmp(env, "0") == 0);
}
bool use_swiglu_fusion(const CudaBackendOptions& options) {
  const char* env = std::getenv("TERN_CUDA_FUSE");
  if (env != nullptr && std::strcmp(env, "swiglu") == 0) return true;
  if (env != nullptr && std::strcmp(env, "noswiglu") == 0) return false;
  return options.fuse_swiglu;
}
bool use_swiglu_epilogue(const CudaBackendOptions& options) {
  const char* env = std::getenv("TERN_CUDA_FUSE");
  if (env != nullptr && std::strcmp(env, "swiglu-epilogue") == 0) return true;
  if (env != nullptr && std::strcmp(env, "noswiglu") == 0) return false;
  return options.fuse_swiglu_epilogue;
}

// The float GEMV at n = 1 (CudaBackendOptions::previous_float_gemv): TERN_CUDA_GEMV_FLOAT=prev
// takes the previous kernels, =stream the register-streamed one.
int gemv_float_kernel(const CudaBackendOptions& options) {
  const char* env = std::getenv("TERN_CUDA_GEMV_FLOAT");
  if (env != nullptr && std::strcmp(env, "prev") == 0) return 1;
  if (env != nullptr && std::strcmp(env, "stream") == 0) return 0;
  return options.previous_float_gemv ? 1 : 0;
}
// Its shape, TERN_CUDA_GEMV_FLOAT_SHAPE=RxU (rows per warp x chunks per batch), else the options.
void gemv_float_shape(const CudaBackendOptions& options, int& rows, int& unroll) {
  rows = options.float_gemv_rows;
  unroll = options.float_gemv_unroll;
  const char* env = std::getenv("TERN_CUDA_GEMV_FLOAT_SHAPE");
  int r = 0, u = 0;
  if (env != nullptr && std::sscanf(env, "%dx%d", &r, &u) == 2) rows = r, unroll = u;
}
bool use_float_gemv_dynamic(const CudaBackendOptions& options) {
  const char* env = std::getenv("TERN_CUDA_GEMV_FLOAT_DYNAMIC");
  if (env != nullptr && *env) return std::strcmp(env, "0") != 0;
  return options.float_gemv_dynamic;
}
// A tri-state switch (0 = the kernel's default, 1 = on, 2 = off): the environment variable when
// set to 1 / 0, else the option.
int on_off_default(const char* name, int option) {
  const char* env = std::getenv(name);
  if (env != nullptr && std::strcmp(env, "1") == 0) return 1;
  if (env != nullptr && std::strcmp(env, "0") == 0) return 2;
  return option == 1 || option == 2 ? option : 0;
}
// CudaBackendOptions::act_bits, unless TERN_CUDA_ACT_BITS is 8 or 16; any other value of either
// gives the default, the variable's with a warning.
int act_bits(const CudaBackendOptions& options) {
  const char* env = std::getenv("TERN_CUDA_ACT_BITS");
  if (env != nullptr && *env) {
    if (std::strcmp(env, "8") == 0) return 8;
    if (std::strcmp(env, "16") == 0) return 16;
    std::fprintf(stderr, "tern: ignoring TERN_CUDA_ACT_BITS=%s (expected 8 or 16)\n", env);
  }
  return options.act_bits == 8 || options.act_bits == 16 ? options.act_bits : kDefaultActBits;
}
// CudaBackendOptions::qmma_min_tokens (0: the default, negative: never), unless TERN_CUDA_QMMA_MIN
// is a count (0: never); 0 = never, -1 = the defaults (by weight size).
int qmma_min_tokens(const CudaBackendOptions& options) {
  const char* env = std::getenv("TERN_CUDA_QMMA_MIN");
  if (env != nullptr && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 0 && v <= (1L << 30)) return static_cast<int>(v);
    std::fprintf(stderr, "tern: ignoring TERN_CUDA_QMMA_MIN=%s (expected a count >= 0)\n", env);
  }
  if (options.qmma_min_tokens < 0) return 0;
  return options.qmma_min_tokens > 0 ? options.qmma_min_tokens : -1;
}
bool use_float_swiglu_epilogue(const CudaBackendOptions& options) {
  const char* env = std::getenv("TERN_CUDA_GEMV_FLOAT_GLU");
  if (env != nullptr && *env) return std::strcmp(env, "0") != 0;
  return options.fuse_float_swiglu_epilogue;
}

// Attention K/V copies with one block-table lookup per row (attention.cu issue_chunk_rows,
// the tensor-core kernel always does): TERN_CUDA_ATTN_ROW_COPY=1. Off: measured no faster.
bool use_attention_row_copy() {
  const char* env = std::getenv("TERN_CUDA_ATTN_ROW_COPY");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

// The tensor-core attention's block shape (attention_tc.h, A/B timing):
// TERN_CUDA_ATTN_TC_VARIANT=0..attention_tc_variants()-1; 0 (the default) otherwise.
int attention_tc_variant() {
  const char* env = std::getenv("TERN_CUDA_ATTN_TC_VARIANT");
  const int v = env != nullptr ? std::atoi(env) : 0;
  return v >= 0 && v < attention_tc_variants() ? v : 0;
}

// The invariant tensor-core attention's split-mode V stages (attention_mma.h, A/B timing):
// TERN_CUDA_ATTN_MMA_STAGES=2 / 4; 0 (per step) otherwise.
int attention_mma_stages() {
  const char* env = std::getenv("TERN_CUDA_ATTN_MMA_STAGES");
  const int v = env != nullptr ? std::atoi(env) : 0;
  return v == 2 || v == 4 ? v : 0;
}

// The GEMV kernel family: TERN_CUDA_GEMV (legacy / default / rows / single / stream / prev) overrides the options; bulk
// copies need sm_90 and kernels compiled for it (not sm_80 code JIT-compiled for a newer GPU).
GemvPath gemv_path(const CudaBackendOptions& options, int cc_major, bool bulk_compiled) {
  const char* env = std::getenv("TERN_CUDA_GEMV");
  bool legacy = options.legacy_gemv, rows = options.rows_gemv, single = options.single_gemv,
       stream = options.stream_gemv, prev = false;
  if (env != nullptr && std::strcmp(env, "legacy") == 0) legacy = true, rows = false, single = false, stream = false;
  if (env != nullptr && std::strcmp(env, "default") == 0) legacy = false, rows = false, single = false, stream = false;
  if (env != nullptr && std::strcmp(env, "rows") == 0) legacy = false, rows = true, single = false, stream = false;
  if (env != nullptr && std::strcmp(env, "single") == 0) legacy = false, rows = false, single = true, stream = false;
  if (env != nullptr && std::strcmp(env, "stream") == 0) legacy = false, rows = false, single = false, stream = true;
  if (env != nullptr && std::strcmp(env, "prev") == 0) legacy = false, rows = false, single = false, stream = false, prev = true;
  if (legacy || cc_major < 9 || !bulk_compiled) return GemvPath::kLegacy;
  if (stream) return GemvPath::kStream;
  if (prev) return GemvPath::kPrev;
  return rows ? GemvPath::kRows : (single ? GemvPath::kSingle : GemvPath::kAuto);
}

// A GEMV shape override: the environment variable when set, else the option.
int gemv_shape_override(const char* name, int option) {
  const char* env = std::getenv(name);
  return env != nullptr && *env ? std::atoi(env) : option;
}

int gemv_stage_bytes() {
  const char* env = std::getenv("TERN_CUDA_GEMV_STAGE_BYTES");
  return env != nullptr ? std::atoi(env) : 0;
}

// The split-mode attention kernel (attention.h), all with the same bits: 0 = the chunk kernel,
// 1 = the span decode kernel, 2 and 3 the two-chunk span kernels (attention_span_pair.cu). The
// option wins when set (tests compare kernels in one process); else TERN_CUDA_ATTN_SPAN (a number, below).
// TERN_CUDA_ATTN_SPAN_STAGES (1-4, default 3) sets the K/V chunks a block keeps in flight.
int attention_span_kernel(const CudaBackendOptions& options) {
  if (options.attention_span_kernel >= 0) return options.attention_span_kernel;
  const char* env = std::getenv("TERN_CUDA_ATTN_SPAN");
  // 2 = the two-chunk span kernel (attention_span_pair.cu), 1 the one-chunk span kernel, 0 the
  // chunk kernel; 3 = the two-chunk kernel with GQA-group values; + 16 = heads-first block order,
  // + 32 = persistent blocks, + 64 = two value dimensions per lane (attention_span.cuh:
  // kSpanHeadsFirst, kSpanPersistent, kSpanValuePairs), e.g. 19, 35, 83, 115; + 128 = split K/V
  // ring, + 256 = values on 8 warps, + 512 = warp-specialized ring (kSpanSplitRing,
  // kSpanValueQueryPairs, kSpanWarpSpecialized), + 1024 = its lean form (kSpanWsLean), e.g. 243,
  // 499, 755, 1779; + 16384 = the sliced span merge, + 32768 its prescaled fold (kSpanMergeSliced,
  // kSpanMergePrescaled), e.g. 18163, 50931.
  // Unset: -1, chosen per shape (default_span_kernel), every choice with the same bits.
  if (env != nullptr && *env != '\0') {
    const int v = std::atoi(env), kernel = v & ~(16 | 32 | 64 | 128 | 256 | 512 | 1024 | 16384 | 32768);
    if (v >= 0 && kernel <= 3 && (v == 0 || kernel != 0)) return v;
  }
  return -1;
}
int attention_span_stages() {
  const char* env = std::getenv("TERN_CUDA_ATTN_SPAN_STAGES");
  const int n = env != nullptr ? std::atoi(env) : 0;
  return n >= 1 && n <= 4 ? n : 3;
}

// The folded span merge (attention_span_merge.cuh): the option wins when set (0 never, 1 where
// faster, 2 always), else TERN_CUDA_ATTN_FOLD_MERGE (same values), else 1.
// TERN_CUDA_ATTN_FOLD_MAX_SPANS sets the most spans per tile that mode 1 folds (default 1: on the
// H200 the folded merge of several spans measured slower than the merge kernel, bench/RESULTS.md).
int attention_fold_merge(const CudaBackendOptions& options) {
  if (options.attention_fold_merge >= 0) return options.attention_fold_merge;
  const char* env = std::getenv("TERN_CUDA_ATTN_FOLD_MERGE");
  if (env != nullptr && (std::strcmp(env, "0") == 0 || std::strcmp(env, "2") == 0)) return std::atoi(env);
  return 1;
}
// The chunk split: the option wins when set (0, 1, 2), else TERN_CUDA_ATTN_CHUNK_SPLIT (same
// values), else -1 (per plan, default_chunk_split, with the default kernel only).
int attention_chunk_split(const CudaBackendOptions& options) {
  if (options.attention_chunk_split >= 0) return options.attention_chunk_split <= 2 ? options.attention_chunk_split : 0;
  const char* env = std::getenv("TERN_CUDA_ATTN_CHUNK_SPLIT");
  if (env != nullptr && (std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0 || std::strcmp(env, "2") == 0)) {
    return std::atoi(env);
  }
  return -1;
}
// K/V copies before the PDL wait: the option wins when set (0 / 1), else TERN_CUDA_ATTN_EARLY_KV
// (0 / 1), else off (on the H200 it helped the attention alone at ctx 128 but slowed whole-model
// decode, bench/RESULTS.md).
bool attention_early_kv(const CudaBackendOptions& options) {
  if (options.attention_early_kv >= 0) return options.attention_early_kv != 0;
  const char* env = std::getenv("TERN_CUDA_ATTN_EARLY_KV");
  return env != nullptr && std::strcmp(env, "1") == 0;
}
// Work before the PDL wait in the fused decode attention: the option wins when set (0-2, larger
// is 2), else TERN_CUDA_ATTN_FUSED_EARLY_KV (0 / 1 / 2), else kDefaultFusedEarlyKv.
int attention_fused_early_kv(const CudaBackendOptions& options) {
  if (options.attention_fused_early_kv >= 0) return std::min(options.attention_fused_early_kv, 2);
  const char* env = std::getenv("TERN_CUDA_ATTN_FUSED_EARLY_KV");
  if (env != nullptr && (std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0 || std::strcmp(env, "2") == 0)) {
    return std::atoi(env);
  }
  return kDefaultFusedEarlyKv;
}
int attention_split_ring(const CudaBackendOptions& options) {
  if (options.attention_split_ring >= 0) return std::min(options.attention_split_ring, kMaxSplitRing);
  const char* env = std::getenv("TERN_CUDA_ATTN_SPLIT_RING");
  if (env == nullptr) return kDefaultSplitRing;
  if (env[0] >= '0' && env[0] <= '0' + kMaxSplitRing && env[1] == '\0') return env[0] - '0';
  return kDefaultSplitRing;
}
// The fused decode attention: the option wins when set (0 or 3), else TERN_CUDA_ATTN_FUSED ("0" or
// "3"), else kDefaultFusedDecode.
int attention_fused_decode(const CudaBackendOptions& options) {
  if (options.attention_fused_decode >= 0) return fused_decode_flags(options.attention_fused_decode);
  const char* env = std::getenv("TERN_CUDA_ATTN_FUSED");
  if (env != nullptr && (env[0] == '0' || env[0] == '3') && env[1] == '\0') return fused_decode_flags(env[0] - '0');
  return fused_decode_flags(kDefaultFusedDecode);
}
// The compact decode attention: the option wins when set (0-3, larger values 3), else
// TERN_CUDA_ATTN_COMPACT ("0" to "3"), else kDefaultAttnCompact.
int attention_compact(const CudaBackendOptions& options) {
  if (options.attention_compact >= 0) return std::min(options.attention_compact, 3);
  const char* env = std::getenv("TERN_CUDA_ATTN_COMPACT");
  if (env != nullptr && env[0] >= '0' && env[0] <= '3' && env[1] == '\0') return env[0] - '0';
  return kDefaultAttnCompact;
}
// The register-tiled attention's least step size: the option when set (negative: never), else
// TERN_CUDA_ATTN_TILED=N (0: never), else kDefaultAttnTiledMin. 0 in the result means never.
int attention_tiled_min_tokens(const CudaBackendOptions& options) {
  if (options.attention_tiled_min_tokens < 0) return 0;
  if (options.attention_tiled_min_tokens > 0) return options.attention_tiled_min_tokens;
  const char* env = std::getenv("TERN_CUDA_ATTN_TILED");
  if (env != nullptr && *env) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end == '\0' && n >= 0 && n <= (1 << 24)) return static_cast<int>(n);
  }
  return kDefaultAttnTiledMin;
}
int attention_fold_max_spans() {
  const char* env = std::getenv("TERN_CUDA_ATTN_FOLD_MAX_SPANS");
  const int n = env != nullptr ? std::atoi(env) : 0;
  return n >= 1 ? n : 1;
}

}  // namespace

BackendSettings resolve_settings(const CudaBackendOptions& options, int cc_major, bool bulk_compiled) {
  BackendSettings s;
  s.pdl = use_pdl(options, cc_major);
  s.tc_prefill = use_tc_prefill(options);
  s.tc_attention = use_tc_attention(options);
  s.attention_row_copy = use_attention_row_copy();
  s.attention_tc_variant = attention_tc_variant();
  s.gemv_path = gemv_path(options, cc_major, bulk_compiled);
  s.gemv_stage_bytes = gemv_stage_bytes();
  s.gemv_rows_per_step = gemv_shape_override("TERN_CUDA_GEMV_ROWS", options.gemv_rows_per_step);
  s.gemv_parts_per_row = gemv_shape_override("TERN_CUDA_GEMV_PARTS", options.gemv_parts_per_row);
  s.attention_span = attention_span_kernel(options);
  s.attention_span_stages = attention_span_stages();
  s.attention_fold_merge = attention_fold_merge(options);
  s.attention_fold_max_spans = attention_fold_max_spans();
  s.attention_chunk_split = attention_chunk_split(options);
  s.attention_early_kv = attention_early_kv(options);
  s.attention_fused_early_kv = attention_fused_early_kv(options);
  s.attention_split_ring = attention_split_ring(options);
  s.attention_fused_decode = attention_fused_decode(options);
  s.attention_compact = attention_compact(options);
  s.attention_tiled_min_tokens = attention_tiled_min_tokens(options);
  s.fuse_gemv = use_gemv_fusion(options) && s.gemv_path != GemvPath::kLegacy;
  s.fuse_swiglu = s.fuse_gemv && use_swiglu_fusion(options);
  // One SwiGLU fusion or the other: the epilogue, folded first, would leave the prologue nothing.
  s.fuse_swiglu_epilogue = s.fuse_gemv && use_swiglu_epilogue(options) && !s.fuse_swiglu;
  s.gemv_float_kernel = gemv_float_kernel(options);
  gemv_float_shape(options, s.gemv_float_rows, s.gemv_float_unroll);
  s.gemv_float_blocks = gemv_shape_override("TERN_CUDA_GEMV_FLOAT_BLOCKS", options.float_gemv_blocks);
  s.gemv_float_dynamic = s.gemv_float_kernel == 0 && use_float_gemv_dynamic(options);
  s.gemv_float_pipe = on_off_default("TERN_CUDA_GEMV_FLOAT_PIPE", options.float_gemv_pipe);
  s.gemv_norm_preload = on_off_default("TERN_CUDA_GEMV_NORM_PRELOAD", options.gemv_norm_preload);
  s.gemv_stream_blocks = gemv_shape_override("TERN_CUDA_GEMV_STREAM_BLOCKS", options.gemv_stream_blocks);
  s.gemv_mixed = on_off_default("TERN_CUDA_GEMV_MIXED", options.gemv_mixed);
  s.fuse_float_swiglu_epilogue = s.fuse_gemv && s.gemv_float_kernel == 0 && use_float_swiglu_epilogue(options);
  s.act_bits = act_bits(options);
  const int qmma_min = qmma_min_tokens(options);
  s.qmma_min_tokens = qmma_min < 0 ? kDefaultQmmaMinTokens : qmma_min;
  s.qmma_min_tokens_small = qmma_min < 0 ? kDefaultQmmaMinTokensSmall : qmma_min;
  s.attention_mma = options.attention_mma == 3 || options.attention_mma == 4
                        ? options.attention_mma
                        : (on_off_default("TERN_CUDA_ATTN_MMA", options.attention_mma) == 1 ? 1 : 0);
  s.attention_mma_stages = attention_mma_stages();
  return s;
}

int fused_decode_flags(int mode) {
  switch (mode) {
    case 0: return 0;
    case 3: return kAttnFusedRope;
    default: return fused_decode_flags(kDefaultFusedDecode);
  }
}

// The default split-mode kernel of a layer shape. Head dim 128 with an f16 cache (the shape the
// GQA-group kernel compiles its score step for): 115 = 3 + 16 + 32 + 64, which on the H200 took
// a 32k decode of the 8B shape from 132.5 to 83.0 us/layer (kernel 2 -> 115, bench/RESULTS.md)
// and is bit-identical to kernel 2 (GpuAttention.GroupSpanKernelEqualsPairKernelBitwise,
// PersistentSpanBlocksEqualOneBlockPerSpan). Other shapes: kernel 2, which decoded SmolLM2 (head
// dim 64, groups of 3) ~5% faster than 83 or 115 (1035 vs 989 / 984 tok/s at ctx 128).
// split_ring 1: 243 = 115 + 128, the split K/V ring (attention_span.cuh kSpanSplitRing); 2: 499
// = 243 + 256, also the values step on all 8 warps (kSpanValueQueryPairs); 3: 755
// = 243 + 512, the warp-specialized ring (kSpanWarpSpecialized: producer warps score step s + 1
// while consumer warps run step s), 32k 86.7 -> 75.9 us/layer, 8k 27.5 -> 25.8 (H200, 8B shape);
// 4 (the default since session 7): 1779 = 755 + 1024, its lean form (kSpanWsLean: the same steps
// with fewer instructions around them), 32k 74 -> 60, 8k 25.4 -> 21.6 us/layer; 5 (the default
// from session 9 to 11): 18163 = 1779 + 16384, the same with the span merge kernel sliced by 32
// dimensions (kSpanMergeSliced: 128 blocks instead of 32 for a 32k decode's 32 heads), the merge
// alone 13.9 -> 11.4 us in ncu, 8B Q4_K_M at 32k 250.9 -> 254.9 tok/s (one in-process A/B; F16
// not measured apart); 6 (the default since session 12): 50931 = 18163 + 32768, the sliced merge
// with its fold's products formed by the whole block ahead of the serial fold
// (kSpanMergePrescaled): attention alone at 32k 59.8 -> 57.8 us/layer, 8B Q4_K_M at 32k 254.5 ->
// 261.2 tok/s, F16 160.9 -> 163.0 (H200, in-process A/Bs, session 12). bench/RESULTS.md "Decode
// attention at long context: the split K/V ring", "... warp-specialized", "... the lean
// warp-specialized ring" and "... what bounds the lean ring".
int default_span_kernel(int head_dim, DType kv_dtype, int split_ring) {
  constexpr int kSplitRing = 128, kValueQueryPairs = 256, kWarpSpecialized = 512, kWsLean = 1024;  // attention_span.cuh
  constexpr int kMergeSliced = 16384, kMergePrescaled = 32768;
  if (head_dim != 128 || kv_dtype != DType::F16) return 2;
  constexpr int kLean = 115 + kSplitRing + kWarpSpecialized + kWsLean;
  if (split_ring >= 6) return kLean + kMergeSliced + kMergePrescaled;
  if (split_ring >= 5) return kLean + kMergeSliced;
  if (split_ring >= 4) return kLean;
  if (split_ring >= 3) return 115 + kSplitRing + kWarpSpecialized;
  return 115 + (split_ring >= 1 ? kSplitRing : 0) + (split_ring >= 2 ? kValueQueryPairs : 0);
}

// Chunk split where whole spans x KV heads leave SMs idle: a block per span then walks its 4
// chunks two at a time (8B shape at ctx 1k: 5 spans x 8 heads = 40 blocks' worth of K/V for 132
// SMs), while the chunks' partials do not depend on each other. One chunk per block while 4 x
// spans x heads <= 2 x SMs, two above that; whole spans once spans x heads reach the SMs, a tile
// has more than kMaxSpans spans (32k: 88.8 whole and persistent, 182 with two chunks: the chunk
// merge folds 512 records per query in a row), or whole spans run the warp-specialized ring
// (span_kernel + 512: the 8B shape's default 1779) and a tile has kWsWholeSpans or more. Up to
// two chunks (positions < 128) the block's one step already takes both, and it merges itself
// (the folded merge): SmolLM2 at ctx 64, 7.7 whole, 8.2 split.
// Measured on the H200 (bench/RESULTS.md "Mid-length decode attention", session 7; attention alone,
// us/layer, whole spans with the GQA group whole per block, attention_span.cu), decode / with
// the rope (which the chunk split fuses into its launch):
//   8B, 1779:   1k 14.0 / 16.4 whole, 14.4 / 14.9 split; 1.5k 14.4 / 16.7 vs 16.1 / 16.6; 2k
//               15.1 / 17.5 vs 20.0 / 20.8; 4k 18.2 / 21.5 vs 30.5 / 31.2; 6k 20.4 vs 40.5
//   SmolLM2, 2: 4k 21.6 / 24.2 whole vs 19.6 / 20.3 split (one chunk); 8 sequences at 1k 22.2
//               vs 16.6 (two chunks), at 1.5k / 2k (168 / 216 spans x heads) 22.9 / 23.9 vs
//               26.7 / 29.2
// (session 5, before the lean ring: one chunk per block took SmolLM2 at ctx 128 / 1k / 4k from
// 11.2 / 16.1 / 19.5 to 8.5 / 9.9 / 19.3.)
int default_chunk_split(int n_split_items, int max_tile_spans, int max_position, int n_kv_heads, int n_sm,
                        int span_kernel) {
  constexpr int kMaxSpans = 24, kWsWholeSpans = 8;
  constexpr int kWarpSpecialized = 512;  // attention_span.cuh kSpanWarpSpecialized
  if (max_position < 2 * kAttnChunkTokens || max_tile_spans > kMaxSpans) return 0;
  const int64_t spans = int64_t{n_split_items} * n_kv_heads;
  if (spans >= int64_t{n_sm}) return 0;
  if ((span_kernel & kWarpSpecialized) != 0 && max_tile_spans >= kWsWholeSpans) return 0;
  return 4 * spans <= 2 * int64_t{n_sm} ? 1 : 2;
}

}  // namespace tern::cuda
