// How a CUDA backend's settings come out of its options, the TERN_CUDA_* environment variables and
// the device's compute capability (backend_settings.h). Host logic only: runs without a GPU, so
// CI checks it.
#include "backends/cuda/backend_settings.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace tern {
namespace {

using cuda::BackendSettings;
using cuda::CudaBackendOptions;
using cuda::GemvPath;
using cuda::resolve_settings;

constexpr const char* kVariables[] = {
    "TERN_CUDA_PDL",         "TERN_CUDA_TC_PREFILL",       "TERN_CUDA_TC_ATTENTION",    "TERN_CUDA_FUSE",
    "TERN_CUDA_ATTN_ROW_COPY", "TERN_CUDA_ATTN_TC_VARIANT", "TERN_CUDA_GEMV",            "TERN_CUDA_GEMV_ROWS",
    "TERN_CUDA_GEMV_PARTS",  "TERN_CUDA_GEMV_STAGE_BYTES", "TERN_CUDA_ATTN_SPAN",       "TERN_CUDA_ATTN_SPAN_STAGES",
    "TERN_CUDA_ATTN_FOLD_MERGE", "TERN_CUDA_ATTN_FOLD_MAX_SPANS", "TERN_CUDA_ATTN_CHUNK_SPLIT",
    "TERN_CUDA_ATTN_EARLY_KV", "TERN_CUDA_GEMV_FLOAT", "TERN_CUDA_GEMV_FLOAT_SHAPE", "TERN_CUDA_GEMV_FLOAT_BLOCKS",
    "TERN_CUDA_GEMV_FLOAT_GLU", "TERN_CUDA_GEMV_FLOAT_DYNAMIC", "TERN_CUDA_ATTN_SPLIT_RING",
    "TERN_CUDA_ATTN_FUSED", "TERN_CUDA_GEMV_FLOAT_PIPE", "TERN_CUDA_GEMV_NORM_PRELOAD",
    "TERN_CUDA_GEMV_MIXED", "TERN_CUDA_ATTN_FUSED_EARLY_KV", "TERN_CUDA_ATTN_COMPACT", "TERN_CUDA_GEMV_STREAM_BLOCKS",
    "TERN_CUDA_ACT_BITS", "TERN_CUDA_QMMA_MIN"};

// Clears every TERN_CUDA_* variable the settings read, and puts the caller's values back after.
class BackendSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) {
      const char* v = std::getenv(name);
      saved_.push_back({name, v != nullptr, v != nullptr ? v : ""});
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const Saved& s : saved_) {
      if (s.set) setenv(s.name, s.value.c_str(), 1);
      else unsetenv(s.name);
    }
  }
  struct Saved {
    const char* name;
    bool set;
    std::string value;
  };
  std::vector<Saved> saved_;
};

TEST_F(BackendSettingsTest, DefaultsOnHopper) {
  const BackendSettings s = resolve_settings(CudaBackendOptions{}, 9, true);
  EXPECT_TRUE(s.pdl);
  EXPECT_FALSE(s.tc_prefill);
  EXPECT_TRUE(s.tc_attention);
  EXPECT_EQ(s.gemv_path, GemvPath::kAuto);
  EXPECT_TRUE(s.fuse_gemv);
  EXPECT_FALSE(s.fuse_swiglu);
  EXPECT_TRUE(s.fuse_swiglu_epilogue);
  EXPECT_EQ(s.attention_span, -1);  // per layer shape
  EXPECT_EQ(s.attention_span_stages, 3);
  EXPECT_EQ(s.attention_fold_merge, 1);
  EXPECT_EQ(s.attention_fold_max_spans, 1);
  EXPECT_EQ(s.attention_chunk_split, -1);  // per plan
  EXPECT_FALSE(s.attention_early_kv);
  EXPECT_EQ(s.attention_split_ring, cuda::kDefaultSplitRing);
  EXPECT_EQ(s.gemv_stage_bytes, 0);
  EXPECT_EQ(s.attention_tc_variant, 0);
  EXPECT_FALSE(s.attention_row_copy);
}

// Ampere / Ada, or a build whose bulk-copy kernels were not compiled for the GPU: no programmatic
// launch, the legacy GEMVs, and so no GEMV fusion (it needs the default kernels).
TEST_F(BackendSettingsTest, OlderGpusTakeTheLegacyKernels) {
  for (const auto& [cc, bulk] : {std::pair{8, true}, std::pair{9, false}}) {
    const BackendSettings s = resolve_settings(CudaBackendOptions{}, cc, bulk);
    EXPECT_EQ(s.pdl, cc >= 9);
    EXPECT_EQ(s.gemv_path, GemvPath::kLegacy);
    EXPECT_FALSE(s.fuse_gemv);
  }
}

TEST_F(BackendSettingsTest, EnvironmentOverridesOptions) {
  setenv("TERN_CUDA_PDL", "0", 1);
  setenv("TERN_CUDA_TC_PREFILL", "1", 1);
  setenv("TERN_CUDA_TC_ATTENTION", "0", 1);
  setenv("TERN_CUDA_FUSE", "swiglu", 1);
  setenv("TERN_CUDA_ATTN_SPAN", "115", 1);
  setenv("TERN_CUDA_ATTN_SPAN_STAGES", "2", 1);
  setenv("TERN_CUDA_ATTN_FOLD_MERGE", "0", 1);
  setenv("TERN_CUDA_GEMV_STAGE_BYTES", "8192", 1);
  setenv("TERN_CUDA_ATTN_CHUNK_SPLIT", "2", 1);
  setenv("TERN_CUDA_ATTN_EARLY_KV", "1", 1);
  setenv("TERN_CUDA_ATTN_SPLIT_RING", "0", 1);
  BackendSettings s = resolve_settings(CudaBackendOptions{}, 9, true);
  EXPECT_EQ(s.attention_chunk_split, 2);
  EXPECT_TRUE(s.attention_early_kv);
  EXPECT_EQ(s.attention_split_ring, 0);
  EXPECT_FALSE(s.pdl);
  EXPECT_TRUE(s.tc_prefill);
  EXPECT_FALSE(s.tc_attention);
  EXPECT_TRUE(s.fuse_gemv);
  EXPECT_TRUE(s.fuse_swiglu);
  EXPECT_FALSE(s.fuse_swiglu_epilogue);  // the prologue instead
  EXPECT_EQ(s.attention_span, 115);
  EXPECT_EQ(s.attention_span_stages, 2);
  EXPECT_EQ(s.attention_fold_merge, 0);
  EXPECT_EQ(s.gemv_stage_bytes, 8192);

  setenv("TERN_CUDA_FUSE", "0", 1);
  setenv("TERN_CUDA_GEMV", "rows", 1);
  s = resolve_settings(CudaBackendOptions{}, 9, true);
  EXPECT_FALSE(s.fuse_gemv);
  EXPECT_FALSE(s.fuse_swiglu);
  EXPECT_EQ(s.gemv_path, GemvPath::kRows);
  setenv("TERN_CUDA_FUSE", "1", 1);  // the rows kernel takes the fused records too
  EXPECT_TRUE(resolve_settings(CudaBackendOptions{}, 9, true).fuse_gemv);
  setenv("TERN_CUDA_GEMV", "single", 1);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).gemv_path, GemvPath::kSingle);
  EXPECT_TRUE(resolve_settings(CudaBackendOptions{}, 9, true).fuse_gemv);
  setenv("TERN_CUDA_GEMV", "stream", 1);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).gemv_path, GemvPath::kStream);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 8, true).gemv_path, GemvPath::kLegacy);  // no sm_90
  setenv("TERN_CUDA_GEMV", "prev", 1);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).gemv_path, GemvPath::kPrev);
  setenv("TERN_CUDA_GEMV", "legacy", 1);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).gemv_path, GemvPath::kLegacy);
  CudaBackendOptions streamed;
  streamed.stream_gemv = true;
  streamed.gemv_stream_blocks = 2;
  unsetenv("TERN_CUDA_GEMV");
  s = resolve_settings(streamed, 9, true);
  EXPECT_EQ(s.gemv_path, GemvPath::kStream);
  EXPECT_EQ(s.gemv_stream_blocks, 2);
  setenv("TERN_CUDA_GEMV", "legacy", 1);
}

// Options a test sets explicitly win over the environment (tests compare kernels in one process);
// values out of range fall back to the defaults.
TEST_F(BackendSettingsTest, ExplicitOptionsWinAndBadValuesFallBack) {
  setenv("TERN_CUDA_ATTN_SPAN", "115", 1);
  setenv("TERN_CUDA_ATTN_FOLD_MERGE", "2", 1);
  CudaBackendOptions o;
  o.attention_span_kernel = 2;
  o.attention_fold_merge = 0;
  setenv("TERN_CUDA_ATTN_CHUNK_SPLIT", "1", 1);
  setenv("TERN_CUDA_ATTN_EARLY_KV", "0", 1);
  o.attention_chunk_split = 0;
  o.attention_early_kv = 1;
  o.attention_split_ring = 1;  // wins over TERN_CUDA_ATTN_SPLIT_RING=0
  setenv("TERN_CUDA_ATTN_SPLIT_RING", "0", 1);
  BackendSettings s = resolve_settings(o, 9, true);
  EXPECT_EQ(s.attention_split_ring, 1);
  EXPECT_EQ(s.attention_span, 2);
  EXPECT_EQ(s.attention_fold_merge, 0);
  EXPECT_EQ(s.attention_chunk_split, 0);
  EXPECT_TRUE(s.attention_early_kv);
  setenv("TERN_CUDA_ATTN_CHUNK_SPLIT", "4", 1);  // 1 or 2 chunks per block only
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_chunk_split, -1);
  setenv("TERN_CUDA_ATTN_SPLIT_RING", "3", 1);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_split_ring, 3);
  setenv("TERN_CUDA_ATTN_SPLIT_RING", "4", 1);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_split_ring, 4);
  setenv("TERN_CUDA_ATTN_SPLIT_RING", "5", 1);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_split_ring, 5);
  setenv("TERN_CUDA_ATTN_SPLIT_RING", "6", 1);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_split_ring, 6);
  setenv("TERN_CUDA_ATTN_SPLIT_RING", "7", 1);  // no such form: the default
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_split_ring, cuda::kDefaultSplitRing);

  setenv("TERN_CUDA_ATTN_SPAN", "5", 1);  // no kernel 5
  setenv("TERN_CUDA_ATTN_SPAN_STAGES", "9", 1);
  setenv("TERN_CUDA_ATTN_FOLD_MERGE", "7", 1);
  setenv("TERN_CUDA_ATTN_TC_VARIANT", "-1", 1);
  s = resolve_settings(CudaBackendOptions{}, 9, true);
  EXPECT_EQ(s.attention_span, -1);
  EXPECT_EQ(s.attention_span_stages, 3);
  EXPECT_EQ(s.attention_fold_merge, 1);
  EXPECT_EQ(s.attention_tc_variant, 0);

  // Every span-kernel flag passes (+ 128 split K/V ring and + 256 values on 8 warps were masked
  // out before, so TERN_CUDA_ATTN_SPAN=243 fell back to the default); a kernel past 3 does not.
  setenv("TERN_CUDA_ATTN_SPAN", "243", 1);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_span, 243);
  setenv("TERN_CUDA_ATTN_SPAN", "499", 1);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_span, 499);
  setenv("TERN_CUDA_ATTN_SPAN", "755", 1);  // + 512: the warp-specialized ring
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_span, 755);
  setenv("TERN_CUDA_ATTN_SPAN", "1779", 1);  // + 1024: its lean form
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_span, 1779);
  setenv("TERN_CUDA_ATTN_SPAN", "50931", 1);  // + 16384 + 32768: the sliced merge, prescaled
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_span, 50931);
  setenv("TERN_CUDA_ATTN_SPAN", "2051", 1);  // 2048 + 3: no such flag
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_span, -1);
}

// The float GEMV at n = 1: the register-streamed kernel with its SwiGLU epilogue by default; the
// previous kernels, a fixed shape or no epilogue on request.
// The fused decode attention (CudaBackendOptions::attention_fused_decode): the option wins, else
// TERN_CUDA_ATTN_FUSED=0 / 3, else the default; 0 maps to no AttentionArgs::fused flag, 3 to the
// rope, and every other value (1, 2 and 4 were the last-block merge modes, removed) keeps the
// default.
TEST_F(BackendSettingsTest, FusedDecodeSwitch) {
  using cuda::kAttnFusedRope;
  const int def = cuda::fused_decode_flags(cuda::kDefaultFusedDecode);
  EXPECT_EQ(def, kAttnFusedRope);  // the rope taken in: the mode measured faster
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_fused_decode, def);
  const std::pair<const char*, int> env_cases[] = {{"0", 0},   {"3", kAttnFusedRope}, {"1", def},  {"2", def},
                                                   {"4", def}, {"5", def},            {"yes", def}, {"11", def},
                                                   {"", def}};
  for (const auto& [value, flags] : env_cases) {
    setenv("TERN_CUDA_ATTN_FUSED", value, 1);
    EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_fused_decode, flags) << value;
  }
  CudaBackendOptions o;
  o.attention_fused_decode = 0;
  setenv("TERN_CUDA_ATTN_FUSED", "3", 1);
  EXPECT_EQ(resolve_settings(o, 9, true).attention_fused_decode, 0);
  o.attention_fused_decode = 2;
  setenv("TERN_CUDA_ATTN_FUSED", "0", 1);
  EXPECT_EQ(resolve_settings(o, 9, true).attention_fused_decode, def);
  o.attention_fused_decode = 9;
  EXPECT_EQ(resolve_settings(o, 9, true).attention_fused_decode, def);
}

// The compact decode attention (CudaBackendOptions::attention_compact): the option wins (0-2,
// larger values 2), else TERN_CUDA_ATTN_COMPACT ("0" / "1" / "2"), else kDefaultAttnCompact.
TEST_F(BackendSettingsTest, CompactDecodeSwitch) {
  const int def = cuda::kDefaultAttnCompact;
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_compact, def);
  const std::pair<const char*, int> env_cases[] = {{"0", 0}, {"1", 1}, {"2", 2}, {"3", 3}, {"4", def}, {"33", def}, {"yes", def}, {"", def}};
  for (const auto& [value, want] : env_cases) {
    setenv("TERN_CUDA_ATTN_COMPACT", value, 1);
    EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_compact, want) << value;
  }
  CudaBackendOptions o;
  o.attention_compact = 0;
  setenv("TERN_CUDA_ATTN_COMPACT", "1", 1);
  EXPECT_EQ(resolve_settings(o, 9, true).attention_compact, 0);
  o.attention_compact = 5;
  setenv("TERN_CUDA_ATTN_COMPACT", "0", 1);
  EXPECT_EQ(resolve_settings(o, 9, true).attention_compact, 3);
}

// The fused decode attention's work before its PDL wait (CudaBackendOptions::
// attention_fused_early_kv): the option wins (0-2, larger values are 2), else
// TERN_CUDA_ATTN_FUSED_EARLY_KV=0/1/2, else the default; other values keep the default. Apart
// from the unfused early copies (TERN_CUDA_ATTN_EARLY_KV), which it neither sets nor reads.
TEST_F(BackendSettingsTest, FusedEarlyKvSwitch) {
  const int def = cuda::kDefaultFusedEarlyKv;
  EXPECT_EQ(def, 2);  // the copies and the rotation factors: measured faster whole-model
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).attention_fused_early_kv, def);
  const std::pair<const char*, int> env_cases[] = {{"0", 0}, {"1", 1}, {"2", 2}, {"3", def}, {"on", def}, {"", def}};
  for (const auto& [value, want] : env_cases) {
    setenv("TERN_CUDA_ATTN_FUSED_EARLY_KV", value, 1);
    const BackendSettings s = resolve_settings(CudaBackendOptions{}, 9, true);
    EXPECT_EQ(s.attention_fused_early_kv, want) << value;
    EXPECT_FALSE(s.attention_early_kv) << value;
  }
  CudaBackendOptions o;
  setenv("TERN_CUDA_ATTN_FUSED_EARLY_KV", "2", 1);
  o.attention_fused_early_kv = 0;
  EXPECT_EQ(resolve_settings(o, 9, true).attention_fused_early_kv, 0);
  o.attention_fused_early_kv = 1;
  EXPECT_EQ(resolve_settings(o, 9, true).attention_fused_early_kv, 1);
  o.attention_fused_early_kv = 7;
  EXPECT_EQ(resolve_settings(o, 9, true).attention_fused_early_kv, 2);
  setenv("TERN_CUDA_ATTN_EARLY_KV", "1", 1);
  setenv("TERN_CUDA_ATTN_FUSED_EARLY_KV", "0", 1);
  const BackendSettings s = resolve_settings(CudaBackendOptions{}, 9, true);
  EXPECT_TRUE(s.attention_early_kv);
  EXPECT_EQ(s.attention_fused_early_kv, 0);
}

TEST_F(BackendSettingsTest, FloatGemvSettings) {
  BackendSettings s = resolve_settings(CudaBackendOptions{}, 9, true);
  EXPECT_EQ(s.gemv_float_kernel, 0);
  EXPECT_EQ(s.gemv_float_rows, 0);
  EXPECT_EQ(s.gemv_float_unroll, 0);
  EXPECT_EQ(s.gemv_float_blocks, 0);
  EXPECT_TRUE(s.fuse_float_swiglu_epilogue);
  EXPECT_FALSE(s.gemv_float_dynamic);
  setenv("TERN_CUDA_GEMV_FLOAT_DYNAMIC", "1", 1);
  EXPECT_TRUE(resolve_settings(CudaBackendOptions{}, 9, true).gemv_float_dynamic);
  setenv("TERN_CUDA_GEMV_FLOAT_SHAPE", "2x8", 1);
  setenv("TERN_CUDA_GEMV_FLOAT_BLOCKS", "3", 1);
  setenv("TERN_CUDA_GEMV_FLOAT_GLU", "0", 1);
  s = resolve_settings(CudaBackendOptions{}, 9, true);
  EXPECT_EQ(s.gemv_float_rows, 2);
  EXPECT_EQ(s.gemv_float_unroll, 8);
  EXPECT_EQ(s.gemv_float_blocks, 3);
  EXPECT_FALSE(s.fuse_float_swiglu_epilogue);
  unsetenv("TERN_CUDA_GEMV_FLOAT_GLU");
  setenv("TERN_CUDA_GEMV_FLOAT", "prev", 1);  // the epilogue needs the streamed kernel
  s = resolve_settings(CudaBackendOptions{}, 9, true);
  EXPECT_EQ(s.gemv_float_kernel, 1);
  EXPECT_FALSE(s.fuse_float_swiglu_epilogue);
  EXPECT_FALSE(s.gemv_float_dynamic);
  setenv("TERN_CUDA_FUSE", "0", 1);
  setenv("TERN_CUDA_GEMV_FLOAT", "stream", 1);
  CudaBackendOptions o;
  o.previous_float_gemv = true;
  s = resolve_settings(o, 9, true);
  EXPECT_EQ(s.gemv_float_kernel, 0);
  EXPECT_FALSE(s.fuse_float_swiglu_epilogue);  // fusion off
}

// The small-GEMV switches: 0 leaves the kernels' default, 1 / 2 force on / off; the environment
// (1 / 0) wins over the options, anything else leaves them.
TEST_F(BackendSettingsTest, SmallGemvSwitches) {
  BackendSettings s = resolve_settings(CudaBackendOptions{}, 9, true);
  EXPECT_EQ(s.gemv_float_pipe, 0);
  EXPECT_EQ(s.gemv_norm_preload, 0);
  CudaBackendOptions o;
  o.float_gemv_pipe = 2;
  o.gemv_norm_preload = 1;
  s = resolve_settings(o, 9, true);
  EXPECT_EQ(s.gemv_float_pipe, 2);
  EXPECT_EQ(s.gemv_norm_preload, 1);
  o.float_gemv_pipe = 7;  // not a switch value: the default
  EXPECT_EQ(resolve_settings(o, 9, true).gemv_float_pipe, 0);
  setenv("TERN_CUDA_GEMV_FLOAT_PIPE", "1", 1);
  setenv("TERN_CUDA_GEMV_NORM_PRELOAD", "0", 1);
  s = resolve_settings(o, 9, true);
  EXPECT_EQ(s.gemv_float_pipe, 1);
  EXPECT_EQ(s.gemv_norm_preload, 2);
  setenv("TERN_CUDA_GEMV_FLOAT_PIPE", "0", 1);
  setenv("TERN_CUDA_GEMV_NORM_PRELOAD", "yes", 1);  // unparsed: the option
  s = resolve_settings(o, 9, true);
  EXPECT_EQ(s.gemv_float_pipe, 2);
  EXPECT_EQ(s.gemv_norm_preload, 1);
}

TEST_F(BackendSettingsTest, GemvMixedSwitch) {
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).gemv_mixed, 0);
  CudaBackendOptions o;
  o.gemv_mixed = 1;
  EXPECT_EQ(resolve_settings(o, 9, true).gemv_mixed, 1);
  setenv("TERN_CUDA_GEMV_MIXED", "0", 1);
  EXPECT_EQ(resolve_settings(o, 9, true).gemv_mixed, 2);
  setenv("TERN_CUDA_GEMV_MIXED", "1", 1);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).gemv_mixed, 1);
}

TEST_F(BackendSettingsTest, DefaultSpanKernelPerShape) {
  EXPECT_EQ(cuda::default_span_kernel(128, DType::F16, 0), 115);  // Llama 3 8B: GQA-group, persistent
  EXPECT_EQ(cuda::default_span_kernel(128, DType::F16, 1), 243);  // + split K/V ring
  EXPECT_EQ(cuda::default_span_kernel(128, DType::F16, 2), 499);  // + values on all warps
  EXPECT_EQ(cuda::default_span_kernel(128, DType::F16, 3), 755);  // split ring, warp-specialized
  EXPECT_EQ(cuda::default_span_kernel(128, DType::F16, 4), 1779);  // its lean form
  EXPECT_EQ(cuda::default_span_kernel(128, DType::F16, 5), 18163);  // + the sliced span merge
  EXPECT_EQ(cuda::default_span_kernel(128, DType::F16, 6), 50931);  // + its prescaled fold
  EXPECT_EQ(cuda::default_span_kernel(128, DType::F16), 50931);     // the default
  EXPECT_EQ(cuda::default_span_kernel(64, DType::F16, 2), 2);
  EXPECT_EQ(cuda::default_span_kernel(64, DType::F16), 2);     // SmolLM2
  EXPECT_EQ(cuda::default_span_kernel(128, DType::F32), 2);
}

// The chunk split where spans x KV heads leave SMs idle (132 SMs: the H200): one chunk per block
// while 4 x spans x heads <= 264, two below 132 spans x heads; never inside two chunks (one step
// of the block, which merges itself), past 24 spans per tile, once spans x heads fill the SMs,
// or from 8 spans per tile where whole spans run the warp-specialized ring (1779, 755: the 8B
// shape's default and its non-lean form; kernel 2 and 243 do not).
TEST_F(BackendSettingsTest, DefaultChunkSplitPerPlan) {
  const int ws = 1779, pair = 2;
  EXPECT_EQ(cuda::default_chunk_split(1, 1, 63, 8, 132, ws), 0);       // one chunk: the folded merge
  EXPECT_EQ(cuda::default_chunk_split(1, 1, 127, 3, 132, pair), 0);    // two chunks: one step
  EXPECT_EQ(cuda::default_chunk_split(1, 1, 128, 8, 132, ws), 1);      // 8B decode at 128
  EXPECT_EQ(cuda::default_chunk_split(5, 5, 1024, 8, 132, ws), 1);     // 8B decode at 1k: 40 spans x heads
  EXPECT_EQ(cuda::default_chunk_split(7, 7, 1536, 8, 132, ws), 1);     // 8B at 1.5k: 56, 7 spans
  EXPECT_EQ(cuda::default_chunk_split(8, 8, 1792, 8, 132, ws), 0);     // 8 spans: the ring whole
  EXPECT_EQ(cuda::default_chunk_split(8, 8, 1792, 8, 132, 755), 0);
  EXPECT_EQ(cuda::default_chunk_split(8, 8, 1792, 8, 132, 18163), 0);  // (the default: 1779 + the sliced merge)
  EXPECT_EQ(cuda::default_chunk_split(8, 8, 1792, 8, 132, 243), 1);    // (no warp specialization): 64
  EXPECT_EQ(cuda::default_chunk_split(8, 8, 1792, 8, 132, pair), 1);
  EXPECT_EQ(cuda::default_chunk_split(9, 9, 2048, 8, 132, ws), 0);     // 8B at 2k: 72
  EXPECT_EQ(cuda::default_chunk_split(17, 17, 4096, 8, 132, ws), 0);   // 8B at 4k: 136
  EXPECT_EQ(cuda::default_chunk_split(25, 25, 6144, 8, 132, pair), 0);  // past 24 spans per tile
  EXPECT_EQ(cuda::default_chunk_split(129, 129, 32768, 8, 132, ws), 0);  // 32k: whole, persistent spans
  EXPECT_EQ(cuda::default_chunk_split(17, 17, 4096, 3, 132, pair), 1);  // SmolLM2 at 4k: 51
  EXPECT_EQ(cuda::default_chunk_split(24, 24, 6000, 3, 132, pair), 2);  // SmolLM2, 24 spans: 72
  EXPECT_EQ(cuda::default_chunk_split(40, 5, 1024, 8, 132, ws), 0);    // 8 sequences at 1k: 320
  EXPECT_EQ(cuda::default_chunk_split(40, 5, 1024, 3, 132, pair), 2);  // SmolLM2, 8 at 1k: 120
  EXPECT_EQ(cuda::default_chunk_split(43, 6, 1400, 3, 132, pair), 2);  // 129: two chunks
  EXPECT_EQ(cuda::default_chunk_split(44, 6, 1400, 3, 132, pair), 0);  // 132: whole spans fill the SMs
  EXPECT_EQ(cuda::default_chunk_split(56, 7, 1536, 3, 132, pair), 0);  // SmolLM2, 8 at 1.5k: 168
  EXPECT_EQ(cuda::default_chunk_split(4, 4, 1000, 8, 132, ws), 1);     // 4 x 32 = 128 <= 264: one chunk
  EXPECT_EQ(cuda::default_chunk_split(9, 3, 700, 8, 132, ws), 2);      // 3 sequences at 700: 72 (3 spans each)
}

// The quantized activations' precision: 16 by default (the CPU's), 8 or 16 from the option, and
// the environment over both; any other value falls back to the default.
TEST_F(BackendSettingsTest, ActivationBits) {
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 9, true).act_bits, 16);
  CudaBackendOptions o;
  o.act_bits = 8;
  EXPECT_EQ(resolve_settings(o, 9, true).act_bits, 8);
  o.act_bits = 12;
  EXPECT_EQ(resolve_settings(o, 9, true).act_bits, 16);
  setenv("TERN_CUDA_ACT_BITS", "16", 1);
  o.act_bits = 8;
  EXPECT_EQ(resolve_settings(o, 9, true).act_bits, 16);
  setenv("TERN_CUDA_ACT_BITS", "8", 1);
  EXPECT_EQ(resolve_settings(CudaBackendOptions{}, 8, false).act_bits, 8);
  setenv("TERN_CUDA_ACT_BITS", "4", 1);  // ignored with a warning
  EXPECT_EQ(resolve_settings(o, 9, true).act_bits, 8);
}

// The tensor-core products' thresholds (matmul_qmma.h): by default 24 activation rows, 64 for small
// weights; an explicit count applies to both, a negative one turns them off, and the environment
// (a count; 0 = off) wins over the option.
TEST_F(BackendSettingsTest, QmmaThresholds) {
  const BackendSettings d = resolve_settings(CudaBackendOptions{}, 9, true);
  EXPECT_EQ(d.qmma_min_tokens, cuda::kDefaultQmmaMinTokens);
  EXPECT_EQ(d.qmma_min_tokens_small, cuda::kDefaultQmmaMinTokensSmall);
  CudaBackendOptions o;
  o.qmma_min_tokens = 2;
  EXPECT_EQ(resolve_settings(o, 9, true).qmma_min_tokens, 2);
  EXPECT_EQ(resolve_settings(o, 9, true).qmma_min_tokens_small, 2);
  o.qmma_min_tokens = -1;
  EXPECT_EQ(resolve_settings(o, 9, true).qmma_min_tokens, 0);
  EXPECT_EQ(resolve_settings(o, 9, true).qmma_min_tokens_small, 0);
  setenv("TERN_CUDA_QMMA_MIN", "48", 1);
  EXPECT_EQ(resolve_settings(o, 9, true).qmma_min_tokens, 48);
  EXPECT_EQ(resolve_settings(o, 9, true).qmma_min_tokens_small, 48);
  setenv("TERN_CUDA_QMMA_MIN", "0", 1);
  o.qmma_min_tokens = 2;
  EXPECT_EQ(resolve_settings(o, 9, true).qmma_min_tokens, 0);
  setenv("TERN_CUDA_QMMA_MIN", "many", 1);  // ignored with a warning
  EXPECT_EQ(resolve_settings(o, 9, true).qmma_min_tokens, 2);
}

}  // namespace
}  // namespace tern
