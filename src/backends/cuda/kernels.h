// Launch arguments and launchers of every CUDA kernel of the backend. Arguments are plain structs
// of device pointers and sizes (trivially copyable: the step recorder stores and compares them
// byte for byte); launchers validate nothing (ops.h and cuda_backend.cpp did) and never
// synchronize or allocate, so they can run inside a CUDA graph capture.
// Strides are in elements of the tensor's own type unless named _bytes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

// Helpers on the argument structs that kernels also call.
#if defined(__CUDACC__)
#define TERN_HOST_DEVICE __host__ __device__
#else
#define TERN_HOST_DEVICE
#endif

namespace tern::cuda {

// The device copy of a BatchPlan plus the attention work lists derived from it (device_plan.h).
// Every pointer is into the backend's plan buffer.
struct DevicePlan {
  const int32_t* token_ids;            // [n_tokens]
  const int32_t* seq_index;            // [n_tokens]
  const int32_t* positions;            // [n_tokens]
  const int32_t* kv_slots;             // [n_tokens]
  const int32_t* block_offsets;        // [n_seqs + 1]
  const int32_t* block_ids;            // [block_offsets[n_seqs]]
  const int32_t* logit_rows;           // [n_logit_rows]
  const int32_t* tile_token_begin;     // [n_tiles] first token of each attention tile
  const int32_t* tile_n_tokens;        // [n_tiles] tokens in the tile (<= kAttnTileTokens)
  const int32_t* tile_n_spans;         // [n_tiles] spans 0 .. n-1 cover the tile's contexts
  const int32_t* split_tile;           // [n_split_items] (tile, span) work items, split mode
  const int32_t* split_span;           // [n_split_items]
  const int32_t* token_partial_begin;  // [n_tokens] first partial slot of each token's spans
  const int32_t* tc_tile_token_begin;  // [n_tc_tiles] tiles of the tensor-core prefill attention
  const int32_t* tc_tile_n_tokens;     // [n_tc_tiles] (<= kAttnTcTileTokens)
  int n_tokens;
  int n_seqs;
  int n_logit_rows;
  int n_tiles;
  int n_split_items;
  int n_partials;  // sum over tokens of (position / kAttnSpanTokens + 1)
  int n_tc_tiles;
  int max_tile_tokens;  // tokens in the largest tile (sizes the attention blocks' memory)
};

struct EmbedArgs {
  const void* table;
  DType dtype;
  int64_t cols;
  size_t table_stride_bytes;
  float* out;
  int64_t out_stride;
  int n_tokens;
  const int32_t* token_ids;
};

// out = x / rms(x) * w. With add_a set, x is first formed as add_a + add_b and stored (the
// residual add that precedes a pre-norm, fused: bit-identical to the two ops in sequence).
struct RmsNormArgs {
  float* x;
  int64_t x_stride;
  const float* w;  // [cols]
  float* out;
  int64_t out_stride;
  int64_t rows, cols;
  float eps;
  const float* add_a;  // nullptr: plain rms_norm
  const float* add_b;
  int64_t add_a_stride, add_b_stride;
};

enum class ElementwiseOp : int32_t { kAdd, kAddBias, kSwiglu };

// out = a op b. kAddBias: b is one row broadcast to every row (b_stride ignored).
struct ElementwiseArgs {
  ElementwiseOp op;
  const float* a;
  int64_t a_stride;
  const float* b;
  int64_t b_stride;
  float* out;
  int64_t out_stride;
  int64_t rows, cols;
};

struct KvWriteArgs {
  const float* k;
  const float* v;
  int64_t k_stride, v_stride;
  void* k_cache;
  void* v_cache;
  int64_t k_cache_stride, v_cache_stride;  // elements of the cache dtype
  DType cache_dtype;                       // F16 or F32
  int64_t cols;
  int n_tokens;
  const int32_t* kv_slots;
};

// Rotates x's n_heads heads and, when x2 is set (two ropes of one layer, q and k, fused into one
// launch), x2's n_heads2 heads the same way. When kv.cols > 0 the layer's kv_write joined the
// launch: the heads from k_first_head on (counting x's heads, then x2's) are kv.k, and the kernel
// also writes kv.k (its rotated values straight from registers) and kv.v to the cache, with the
// conversions kv_write_kernel uses, so the cache gets the same bits.
struct RopeArgs {
  float* x;
  int64_t x_stride;
  float* x2;
  int64_t x2_stride;
  int n_heads2;
  int n_tokens, n_heads, head_dim, n_rot;
  int neox;  // int, not bool: no padding bytes inside the record
  float mscale;
  const float* inv_freq;  // [n_rot / 2]
  const int32_t* positions;
  int k_first_head;  // with kv.cols > 0
  KvWriteArgs kv;    // kv.cols == 0: no fused cache write
};

// Greedy sampling on the device (argmax.cu): keys[r] = the largest key (argmax.cu) over row r's
// elements; the host decodes the winning index from it (decode_argmax_key). Two launches: each
// of blocks_per_row blocks writes its share's key to partials, then one warp per row takes the max.
struct ArgmaxArgs {
  const float* x;
  int64_t x_stride;
  int64_t cols;
  int rows;
  int blocks_per_row;            // argmax_blocks_per_row(cols)
  unsigned long long* partials;  // [rows, blocks_per_row]
  unsigned long long* keys;      // [rows]
};
int argmax_blocks_per_row(int64_t cols);

// Sampling candidates on the device (top_candidates.cu): per row the best `count` entries in
// core/top_candidates.h's order, its flags and (rows with temperatures[r] > 0) the softmax
// normalizer in `parts` partial sums. Two launches, three with temperatures.
struct TopCandidatesArgs {
  const float* x;
  int64_t x_stride;
  int64_t cols;
  int64_t part_cols;             // TopCandidatesShape
  int rows;
  int count;                     // entries per row, <= cap
  int cap;                       // TopCandidatesShape
  int parts;                     // TopCandidatesShape
  unsigned long long* partial_keys;  // [rows, parts, cap]
  uint32_t* partial_flags;           // [rows, parts]
  int32_t* ids;                      // [rows, count]
  float* logits;                     // [rows, count]
  uint32_t* flags;                   // [rows]
  const float* temperatures;         // [rows], or null: no sums
  double* exp_partials;              // [rows, parts]
};
struct TopCandidatesShape {
  int cap = 1;             // count rounded up to a power of two
  int parts = 1;           // blocks per row in the first launch
  int64_t part_cols = 0;   // columns per part (a multiple of the 4096-element chunk)
};
TopCandidatesShape top_candidates_shape(int64_t cols, int count);

struct GatherRowsArgs {
  const float* x;
  int64_t x_stride;
  float* out;
  int64_t out_stride;
  int64_t cols;
  int n_rows;
  const int32_t* rows;  // [n_rows] source rows
};

constexpr int kMaxFusedMatmuls = 3;

// Which GEMV kernels a product takes (gemv.h). Every path gives the same bits; kLegacy keeps the
// previous kernels for A/B timing (TERN_CUDA_GEMV=legacy).
enum class GemvPath : int32_t {
  kAuto = 0,    // sm_90: bulk-copy (TMA) staging for 16-byte aligned rows, single-row tiles at n = 1,
                // and gemv_rows.cu for the n = 1 products where it measured faster (gemv_rows_default)
  kLegacy = 1,  // per-lane cp.async staging; one-row-per-warp float kernel
  kRows = 2,    // kAuto, with gemv_rows.cu for every n = 1 product it takes: several rows per warp
                // step, rows split over warps, balanced grid (TERN_CUDA_GEMV=rows)
  kSingle = 3,  // kAuto without gemv_rows.cu: the previous default (TERN_CUDA_GEMV=single)
  kStream = 4,  // kAuto, with gemv_stream.cu (register-streamed) for every n = 1 product it takes
                // (TERN_CUDA_GEMV=stream)
  kPrev = 5,    // kAuto as before gemv_stream.cu: no product takes it (TERN_CUDA_GEMV=prev, A/B)
};

// Ops fused into a GEMV launch (cuda_backend.cpp's peephole; gemv_fusion.cuh has the shared
// arithmetic, so fused and separate launches give the same bits). A prologue forms the product's
// activations x itself instead of reading them: kRmsNorm x = rms_norm(src rows, weight src2),
// kSwiglu x = swiglu(gate src, up src2). The residual epilogue adds each output to residual (the
// add that followed the product). Kernels without a prologue of their own run the op's kernel
// first (matmul.cu), so every GEMV path accepts a fused record.
enum class GemvPrologue : int32_t { kNone = 0, kRmsNorm = 1, kSwiglu = 2 };
struct GemvFusion {
  GemvPrologue prologue;
  int32_t write_x;     // 1: the launch also stores the activations it forms into MatmulArgs::x
  const float* src;    // kRmsNorm: the norm's input rows [n, cols]; kSwiglu: gate rows
  int64_t src_stride;
  const float* src2;   // kRmsNorm: the norm weight [cols]; kSwiglu: up rows
  int64_t src2_stride;
  float eps;           // kRmsNorm
  // 1: the launch reads and writes nothing its predecessor (the launch of the same activations
  // that carried this RMSNorm first: q/k/v split by weight type) writes or reads, except the
  // norm's inputs both only read, so a kernel may run it alongside that launch and wait for the
  // predecessor only before it exits (completion stays ordered along the stream). Kernels that
  // ignore it wait first, as always (gemv_rows.cu honours it, only with
  // TERN_CUDA_GEMV_CONCURRENT=1: gemv_rows.cu run_concurrent()).
  int32_t concurrent;
  int* done_blocks;    // kSwiglu with write_x: the backend's block counter (zero between launches)
  float* residual;     // epilogue (n_mats == 1): residual[i * residual_stride + r] += y[i, r]
  int64_t residual_stride;
  // SwiGLU epilogue (n_mats == 2, gate and up of equal rows): glu_out[i * glu_out_stride + r] =
  // swiglu(y_0[i, r], y_1[i, r]) after both are stored; the quantized kernels give a warp gate
  // row r and up row r in turn (gemv_quant.cu), the others run the elementwise kernel after.
  float* glu_out;
  int64_t glu_out_stride;
};

// y_m[n, rows_m] = x[n, cols] @ w_m^T for m < n_mats: up to three weights of one dtype and
// width applied to the same activations (q/k/v, gate/up) in one launch. Weights in GGUF layout
// (rows of w_stride_bytes); x, y contiguous. The rows of all matrices form one index space.
struct MatmulArgs {
  DType dtype;
  int n_mats;
  int64_t cols;
  const float* x;  // [n, cols]
  int64_t n;
  int max_smem_bytes;  // the device's opt-in shared memory per block (kernel eligibility)
  int n_sm;            // multiprocessors (grid sizing)
  int32_t gemv_path;   // a GemvPath
  int stage_bytes_per_warp;  // bulk-copy pipeline budget per warp (0: the kernel's default)
  int gemv_rows_per_step;    // GemvPath::kRows: weight rows per warp step, 1 / 2 / 4 (0: chosen per shape)
  int gemv_parts_per_row;    // GemvPath::kRows: warps per weight row, 1 / 2 / 4 (0: chosen per shape)
  // F32 / F16 / BF16 rows at n = 1 (gemv.h): 0 = the register-streamed kernel
  // (gemv_float_stream.cu), 1 = the previous float kernels (A/B timing, tests). Its rows per warp
  // (1 / 2 / 4) and chunks per load batch (4 / 8 / 16), 0: chosen per shape; its blocks per SM
  // at most gemv_float_blocks (0: as many as fit).
  int gemv_float_kernel;
  int gemv_float_rows;
  int gemv_float_unroll;
  int gemv_float_blocks;
  // The streamed float kernel's two-buffer variant (gemv_float_stream.cu, pipe): a lane's next
  // batch of weight words is issued while it multiplies the current one, so a warp's stream never
  // drains between batches or rows. 0 = the default, 1 = on, 2 = off (A/B timing, tests).
  int gemv_float_pipe;
  // The quantized kernels' RMSNorm prologue (gemv_tile.cuh quantize_tile_fused): each thread's
  // norm-weight values are loaded before the PDL wait (the weight is constant), which takes an
  // L2 round trip off the path after it (gemv_rows.cu, and gemv_quant.cu's early-load single-row
  // instances, which also load the residual epilogue's old value right after the wait). 0 = the
  // default, 1 = on, 2 = off (A/B timing, tests).
  int gemv_norm_preload;
  // The register-streamed quantized kernel's blocks per SM (gemv_stream.cu: its registers are
  // sized for 1 or 2), 0 = per type (A/B timing, tests).
  int gemv_stream_blocks;
  // Bits of the quantized activations (gemv_items.cuh): 8 (int8) or 16 (int16); one value per
  // backend (CudaBackendOptions::act_bits), never per call.
  int32_t x_bits;
  // A mixed-type launch (CudaBackendOptions::gemv_mixed; Q4_K_M's q4_k q+k with its q6_k v):
  // matrices tail_mat .. n_mats - 1 hold tail_dtype rows, the others dtype; 0 = one type. Only
  // gemv_rows.cu runs such a launch in one kernel (gemv_rows_mixed_supports); launch_matmul runs
  // any other as its two parts, the tail part forming its activations as a carried norm does.
  int32_t tail_mat;
  DType tail_dtype;
  const void* w[kMaxFusedMatmuls];
  size_t w_stride_bytes[kMaxFusedMatmuls];
  int64_t rows[kMaxFusedMatmuls];
  float* y[kMaxFusedMatmuls];  // [n, rows_m]
  // The register-streamed float kernel's work counter (two ints, zero between launches): with
  // it, warps claim their units after the first one as they finish (gemv_float_stream.cu);
  // nullptr: each warp walks a fixed stride of units.
  int* gemv_float_counter;
  // The tensor-core product's scratch (matmul_qmma.h: the quantized activations,
  // qmma_scratch_bytes(n, cols)); set by the backend for products of many activation rows, which
  // then take that kernel where it handles the weight. nullptr: the GEMV family.
  uint8_t* qmma_x;
  GemvFusion fuse;             // all zero: a plain product

  TERN_HOST_DEVICE int64_t total_rows() const { return rows[0] + (n_mats > 1 ? rows[1] : 0) + (n_mats > 2 ? rows[2] : 0); }
};

// Fused decode attention (attention.h, "fused decode"; AttentionArgs::fused): the layer's rope of
// q and k and its K/V cache write, run inside the attention launch. q (AttentionArgs::q) and k
// are the un-rotated rows; the cache, positions and slots are the attention's own (k_cache,
// v_cache, plan.positions, plan.kv_slots).
struct AttentionRope {
  const float* inv_freq;  // [n_rot / 2]
  const float* k;         // [n_tokens][n_kv_heads * head_dim]
  const float* v;
  int64_t k_stride, v_stride;
  int n_rot;
  int neox;  // int, not bool: no padding bytes inside the record
  float mscale;
  int pad;
};

// Attention of q over the paged KV of each token's sequence (attention.h).
struct AttentionArgs {
  const float* q;
  int64_t q_stride;
  float* out;
  int64_t out_stride;
  const void* k_cache;
  const void* v_cache;
  int64_t k_cache_stride, v_cache_stride;  // elements of kv_dtype
  DType kv_dtype;                          // F16 or F32
  int block_tokens;
  int n_heads, n_kv_heads, head_dim;
  float scale;
  int sliding_window;
  float softcap;
  int split;        // 1: one block per (tile, span) item + merge kernel; 0: one block per tile
  int tc;           // 1: the tensor-core prefill kernel (attention_tc.h); split is then 0
  int kv_stages;    // K/V chunks a block keeps in flight (chunk kernel 1-2, span kernel 1-4: what fits)
  int row_copy;     // 1: one block-table lookup per K/V row (TERN_CUDA_ATTN_ROW_COPY=1)
  int span_kernel;  // split mode: 1: the span kernel and its merge (attention.h), 0: the chunk kernel
  int heads_per_block;  // span kernel: q heads of a GQA group per block (plan_attention_span)
  int fold_merge;       // span kernels: 1: the last span block of a tile merges it, no merge kernel
  int* merge_counters;  // with fold_merge: [n_tiles][gridDim.y] zero between launches
  int tc_variant;       // tensor-core kernel: block shape (attention_tc.h; TERN_CUDA_ATTN_TC_VARIANT)
  int early_kv;         // two-chunk span kernels: copy the first K/V chunks before the PDL wait
                        // (with the fused rope, 2: its rotation factors too)
                        // (rows no token of the step writes; attention.h)
  int chunk_split;      // two-chunk span kernels: K/V chunks per block (1 or 2; attention.h chunk
                        // split, partials per chunk and the chunk merge), 0: one block per span
  float* partials;  // split mode: [n_partials, n_heads, head_dim + 2]; chunk split:
                    // [n_partials, kAttnSpanChunks, n_heads, head_dim + 2]
  // Fused decode (two-chunk span kernels with the chunk split, one token per sequence; attention.h,
  // "fused decode"), flags: kAttnFusedRope: q is rotated in the blocks and the new K/V rows
  // written by them (rope).
  int fused;
  AttentionRope rope;
  // The register-tiled kernel (attention_tiled.h): query tokens per block (0: not tiled) and, in
  // its split mode, spans per block and span groups (0 and 1: fused).
  int tiled;
  int tiled_spans;
  int tiled_groups;
  DevicePlan plan;
};

// Sizes the kernels are specialized for (the invariance contract fixes them; see attention.h).
constexpr int kAttnChunkTokens = 64;                                // positions per softmax chunk
constexpr int kAttnSpanChunks = 4;                                  // chunks per split partial
constexpr int kAttnSpanTokens = kAttnChunkTokens * kAttnSpanChunks;  // positions per span
constexpr int kAttnTileTokens = 8;                                  // query tokens per tile
constexpr int kAttnMaxHeadDim = 256;                                // and head_dim % 8 == 0
constexpr int kAttnTcTileTokens = 128;                              // tensor-core prefill tiles

// AttentionArgs::fused flags.
constexpr int kAttnFusedRope = 1;

// Bytes of attention partials a split launch needs.
size_t attention_partials_bytes(const AttentionArgs& a);
// Dynamic shared memory one attention block needs (must not exceed the device's opt-in limit).
size_t attention_smem_bytes(const AttentionArgs& a);

// One run of rows moved between a packed staging buffer and strided device memory (the KV
// tiers' restores and spills, kv_transfer.h): rows [0, rows) of row_bytes each, at
// strided + r * row_stride_bytes on one side and packed + packed_offset + r * row_bytes on the
// other. A piece larger than a few tens of KiB is split into several items so blocks stay even.
struct PackedCopyItem {
  uint8_t* strided;
  uint64_t packed_offset;
  uint64_t row_stride_bytes;
  uint32_t row_bytes;
  uint32_t rows;
};

// items[0, n_items) (device memory) of one transfer chunk; packed is the device staging buffer.
// scatter: packed -> strided (restores); else strided -> packed (spills). Items never overlap.
struct PackedCopyArgs {
  const PackedCopyItem* items;
  uint8_t* packed;
  int n_items;
  int scatter;
};

// Where and how a launcher enqueues its kernels.
struct LaunchEnv {
  cudaStream_t stream;
  // Programmatic dependent launch (launch.cuh): each kernel may start while its predecessor on
  // the stream finishes. Only on sm_90+; results are identical either way.
  bool pdl;
};

void launch_embed(const EmbedArgs& a, const LaunchEnv& env);
void launch_rms_norm(const RmsNormArgs& a, const LaunchEnv& env);
void launch_elementwise(const ElementwiseArgs& a, const LaunchEnv& env);
void launch_rope(const RopeArgs& a, const LaunchEnv& env);
void launch_kv_write(const KvWriteArgs& a, const LaunchEnv& env);
void launch_gather_rows(const GatherRowsArgs& a, const LaunchEnv& env);
void launch_argmax_rows(const ArgmaxArgs& a, const LaunchEnv& env);
void launch_top_candidates(const TopCandidatesArgs& a, const LaunchEnv& env);
// The index a row's winning key (ArgmaxArgs) stands for.
inline int32_t decode_argmax_key(unsigned long long key) { return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key)); }
// One block per item; 16-byte copies when every address and size of the item allows, else
// 4-byte, else bytes. Bit-exact whatever the path (kv_copy.cu).
void launch_packed_copy(const PackedCopyArgs& a, const LaunchEnv& env);
void launch_matmul(const MatmulArgs& a, const LaunchEnv& env);
void launch_attention(const AttentionArgs& a, const LaunchEnv& env);
// The tensor-core prefill attention (attention_tc.h); launch_attention calls it when a.tc is set.
void launch_attention_tc(const AttentionArgs& a, const LaunchEnv& env);
// True when the tensor-core kernel handles this shape (f16 cache, head_dim 64 or 128).
bool attention_tc_supports(const AttentionArgs& a);

// True for every weight dtype launch_matmul / launch_embed accept.
bool matmul_supports(DType t);

// One-time per-device setup: raises the kernels' dynamic shared-memory limit to the device's
// opt-in maximum. Call on each device before its first launch; idempotent.
void init_matmul(int max_smem_bytes);
// True when the bulk-copy GEMV kernels were compiled for the current device (their PTX is
// sm_90+): a binary built for sm_80 and run on a newer GPU JIT-compiles sm_80 code, whose bulk
// kernels trap, so such a device takes GemvPath::kLegacy.
bool gemv_bulk_compiled();
void init_attention(int max_smem_bytes);
void init_attention_tc(int max_smem_bytes);

}  // namespace tern::cuda
