// gpu_bench --gemv: the GEMV kernels measured apart from the model (gemv_bench.cpp).
#pragma once

#include <string>
#include <vector>

namespace tern::bench {

struct GemvBenchOptions {
  int n = 1;                    // activation rows (1: batch-1 decode)
  int iters = 50;               // products per timed run (at least two passes over the replicas)
  std::string filter;           // only shapes whose "type label" contains one of these (a,b,c)
  std::vector<int> stage_bytes; // bulk-pipeline budgets per warp to sweep (empty: the default)
  bool skip_legacy = false;     // time the default kernels only
  // GemvPath::kRows shapes to time after the default, "RxP" (R rows per warp step, P warps per
  // row; gemv_rows.cu) or "auto" (the per-shape choice); empty: none. Each is compared bit for
  // bit with the default kernels' output.
  // Prefixes (here and in float_shapes, any order): "norm:" the RMSNorm prologue (compared with the
  // first "norm:" entry instead of the default), "res:" the residual epilogue (one matrix),
  // "pre:" / "nopre:" the quantized norm-weight preload on / off, "pipe:" / "one:" the float
  // kernel's two-buffer / one-buffer variant, "sb1:" / "sb2:" the streamed quantized kernel's
  // blocks per SM, and (rows entries, first) "glu:" the SwiGLU epilogue of a gate+up pair; the
  // bare names "single", "default", "stream" (gemv_stream.cu wherever it takes the product) and
  // "prev" (the default before it) take those paths instead of the multi-row one.
  std::vector<std::string> rows_shapes = {"auto"};
  // Float products (F32 / F16 / BF16) at n = 1, timed after the default (the register-streamed
  // kernel, gemv_float_stream.cu): "prev" (the previous float kernels) or a streamed shape "RxU"
  // (R rows per warp, U chunks per load batch), optionally "/B" (at most B blocks per SM), or
  // "auto"; a "glu:" prefix adds the SwiGLU epilogue (gate+up shapes only), "dyn:" dynamic units
  // (a work counter; CudaBackendOptions::float_gemv_dynamic). Each is compared bit
  // for bit with the default's output (the products; not the epilogue's).
  std::vector<std::string> float_shapes = {"prev"};
};

// Prints one line per shape and kernel path; 0 on success.
int run_gemv_bench(const GemvBenchOptions& o);

}  // namespace tern::bench
