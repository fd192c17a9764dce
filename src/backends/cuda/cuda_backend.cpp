// CudaBackend: device memory, transfers, the per-step plan upload, and the ops, each of which
// checks what ops.h cannot (device placement, supported types) and appends a launch record to
// the StepQueue.
#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/attention.h"
#include "backends/cuda/attention_mma.h"
#include "backends/cuda/attention_tiled.h"
#include "backends/cuda/attention_tc.h"
#include "backends/cuda/backend_settings.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_buffer.h"
#include "backends/cuda/device_plan.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/gemv_fusion_plan.h"
#include "backends/cuda/rope_fusion_plan.h"
#include "backends/cuda/host_staging.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/kv_transfer.h"
#include "backends/cuda/matmul_qmma.h"
#include "backends/cuda/matmul_tc.h"
#include "backends/cuda/step_queue.h"
#include "backends/cuda/tc_gemm.h"

namespace tern::cuda {
namespace {

bool is_device(const Tensor& t) { return t.device == Device::kCuda; }

class CudaBackend final : public Backend {
 public:
  CudaBackend(const CudaBackendOptions& options, const BackendSettings& settings, const cudaDeviceProp& prop,
              cudaStream_t stream, std::unique_ptr<TcGemm> tc_gemm)
      : options_(options),
        n_sm_(prop.multiProcessorCount),
        max_smem_bytes_(static_cast<int>(prop.sharedMemPerBlockOptin)),
        gemv_path_(settings.gemv_path),
        gemv_stage_bytes_(settings.gemv_stage_bytes),
        gemv_rows_per_step_(settings.gemv_rows_per_step),
        gemv_parts_per_row_(settings.gemv_parts_per_row),
        stream_(stream),
        queue_(std::make_shared<StepQueue>(stream, options.use_graphs, settings.pdl)),
        tc_gemm_(std::move(tc_gemm)),
        tc_attention_(tc_gemm_ != nullptr && settings.tc_attention),
        attention_row_copy_(settings.attention_row_copy),
        attention_tc_variant_(settings.attention_tc_variant),
        attention_span_(settings.attention_span),
        attention_span_stages_(settings.attention_span_stages),
        attention_fold_merge_(settings.attention_fold_merge),
        attention_fold_max_spans_(settings.attention_fold_max_spans),
        attention_chunk_split_(settings.attention_chunk_split),
        attention_early_kv_(settings.attention_early_kv),
        attention_fused_early_kv_(settings.attention_fused_early_kv),
        attention_split_ring_(settings.attention_split_ring),
        attention_fused_decode_(settings.attention_fused_decode),
        attention_compact_(settings.attention_compact),
        fuse_gemv_(settings.fuse_gemv),
        fuse_swiglu_(settings.fuse_swiglu),
        fuse_swiglu_epilogue_(settings.fuse_swiglu_epilogue),
        fuse_float_swiglu_epilogue_(settings.fuse_float_swiglu_epilogue),
        gemv_float_kernel_(settings.gemv_float_kernel),
        gemv_float_rows_(settings.gemv_float_rows),
        gemv_float_unroll_(settings.gemv_float_unroll),
        gemv_float_blocks_(settings.gemv_float_blocks),
        gemv_float_pipe_(settings.gemv_float_pipe),
        gemv_norm_preload_(settings.gemv_norm_preload),
        gemv_stream_blocks_(settings.gemv_stream_blocks),
        gemv_mixed_(settings.gemv_mixed != 2 && prop.major >= 9),
        act_bits_(settings.act_bits),
        qmma_min_tokens_(prop.major >= 8 ? settings.qmma_min_tokens : 0),
        qmma_min_tokens_small_(prop.major >= 8 ? settings.qmma_min_tokens_small : 0),
        attention_mma_(settings.attention_mma),
        attention_mma_stages_(settings.attention_mma_stages),
        attention_tiled_min_tokens_(settings.attention_tiled_min_tokens) {
    TERN_CUDA_CHECK(cudaEventCreateWithFlags(&plan_uploaded_, cudaEventDisableTiming));
    if (fuse_swiglu_) fusion_counter_ = alloc(64);  // zero-filled (GemvFusion::done_blocks)
    if (settings.gemv_float_dynamic) gemv_float_counter_ = alloc(64);  // MatmulArgs::gemv_float_counter
  }
  ~CudaBackend() override {
    queue_->flush();
    cudaStreamSynchronize(stream_);
    plan_dev_.reset();
    partials_.reset();
    merge_counters_.reset();
    fusion_counter_.reset();
    gemv_float_counter_.reset();
    tc_x16_.reset();
    tc_w16_.reset();
    tc_gemm_.reset();
    qmma_x_.reset();
    queue_.reset();
    cudaEventDestroy(plan_uploaded_);
    cudaStreamDestroy(stream_);
  }

  std::string_view name() const override { return "cuda"; }
  int activation_bits() const override { return act_bits_; }
  Device device() const override { return Device::kCuda; }
  CudaBackendStats stats() const {
    CudaBackendStats s = queue_->stats();
    s.tc_matmuls = tc_matmuls_;
    s.tc_attentions = tc_attentions_;
    s.folded_merges = folded_merges_;
    s.chunk_splits = chunk_splits_;
    s.gemv_fusions = gemv_fusions_;
    s.gemv_mixed = gemv_mixed_joins_;
    s.fused_kv_writes = fused_kv_writes_;
    s.fused_attentions = fused_attentions_;
    s.compact_attentions = compact_attentions_;
    s.fused_early_kv = fused_early_kv_;
    s.gemv_path = static_cast<int>(gemv_path_);
    s.act_bits = act_bits_;
    s.qmma_min_tokens = qmma_min_tokens_;
    s.qmma_matmuls = qmma_matmuls_;
    s.mma_attentions = mma_attentions_;
    s.mma_split_attentions = mma_split_attentions_;
    s.tiled_attentions = tiled_attentions_;
    s.tiled_split_attentions = tiled_split_attentions_;
    return s;
  }

  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    return std::make_unique<DeviceBuffer>(bytes, stream_, queue_);
  }

  bool holds_weights() const override { return true; }

  std::optional<MemoryInfo> memory_info() const override {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return std::nullopt;
    }
    return MemoryInfo{free_bytes, total_bytes};
  }

  Tensor upload_weight(const Tensor& host, std::unique_ptr<Buffer>& owner) override {
    TERN_CHECK_MSG(host.device == Device::kCpu, "upload_weight: the source must be host memory");
    owner = alloc(host.bytes());
    TERN_CUDA_CHECK(cudaMemcpyAsync(owner->data(), host.data, host.bytes(), cudaMemcpyHostToDevice, stream_));
    TERN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    Tensor t = host;
    t.data = owner->data();
    t.device = Device::kCuda;
    return t;
  }

  void copy_from_host(const void* src, Tensor& dst) override {
    TERN_CHECK(is_device(dst));
    queue_->flush();
    const size_t width = row_bytes(dst.dtype, dst.cols);
    TERN_CUDA_CHECK(cudaMemcpy2DAsync(dst.data, dst.row_stride, src, width, width, static_cast<size_t>(dst.rows),
                                      cudaMemcpyHostToDevice, stream_));
    TERN_CUDA_CHECK(cudaStreamSynchronize(stream_));  // src may be reused as soon as we return
  }

  void copy_to_host(const Tensor& src, void* dst) override {
    TERN_CHECK(is_device(src));
    queue_->flush();
    const size_t width = row_bytes(src.dtype, src.cols), total = width * static_cast<size_t>(src.rows);
    void* staging = host_staging_.reserve(total);
    TERN_CUDA_CHECK(cudaMemcpy2DAsync(staging, width, src.data, src.row_stride, width, static_cast<size_t>(src.rows),
                                      cudaMemcpyDeviceToHost, stream_));
    TERN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(dst, staging, total);
  }

  // Many-piece transfers (KV tier restores and spills) go through KvTransfer (kv_transfer.h):
  // packed chunks, one DMA and one scatter / gather kernel each. Recorded ops run first.
  void copy_from_host_n(std::span<const HostToDevice> copies) override {
    queue_->flush();
    kv_transfer_.to_device(copies);
  }
  void copy_to_host_n(std::span<const DeviceToHost> copies) override {
    queue_->flush();
    kv_transfer_.to_host(copies);
  }

  // Device -> device on the stream (the KV pool's copy-on-write); nothing waits.
  void copy_on_device(const Tensor& src, Tensor& dst) override {
    TERN_CHECK(is_device(src) && is_device(dst));
    TERN_CHECK(src.dtype == dst.dtype && src.rows == dst.rows && src.cols == dst.cols);
    queue_->flush();  // recorded ops that write src run first
    const size_t width = row_bytes(src.dtype, src.cols);
    TERN_CUDA_CHECK(cudaMemcpy2DAsync(dst.data, dst.row_stride, src.data, src.row_stride, width,
                                      static_cast<size_t>(src.rows), cudaMemcpyDeviceToDevice, stream_));
  }

  void cancel_step() override { queue_->discard(); }

  void begin_step(const BatchPlan& plan) override {
    queue_->flush();  // the previous step's records read the plan buffer we are about to refill
    layout_ = pack_plan(plan, AttentionPlanSizes{kAttnSpanTokens, kAttnTileTokens, kAttnTcTileTokens}, plan_words_);
    const size_t bytes = std::max<size_t>(static_cast<size_t>(layout_.total) * sizeof(int32_t), 4);
    if (plan_dev_ == nullptr || plan_dev_->bytes() < bytes) {
      plan_dev_ = alloc(std::max({bytes, 2 * (plan_dev_ ? plan_dev_->bytes() : 0), size_t{1} << 16}));
    }
    // The previous upload must have left the staging buffer before it is overwritten.
    TERN_CUDA_CHECK(cudaEventSynchronize(plan_uploaded_));
    void* staging = plan_staging_.reserve(bytes);
    std::memcpy(staging, plan_words_.data(), static_cast<size_t>(layout_.total) * sizeof(int32_t));
    TERN_CUDA_CHECK(cudaMemcpyAsync(plan_dev_->data(), staging, bytes, cudaMemcpyHostToDevice, stream_));
    TERN_CUDA_CHECK(cudaEventRecord(plan_uploaded_, stream_));

    const auto* base = static_cast<const int32_t*>(plan_dev_->data());
    DevicePlan& p = plan_;
    p.token_ids = base + layout_.token_ids;
    p.seq_index = base + layout_.seq_index;
    p.positions = base + layout_.positions;
    p.kv_slots = base + layout_.kv_slots;
    p.block_offsets = base + layout_.block_offsets;
    p.block_ids = base + layout_.block_ids;
    p.logit_rows = base + layout_.logit_rows;
    p.tile_token_begin = base + layout_.tile_token_begin;
    p.tile_n_tokens = base + layout_.tile_n_tokens;
    p.tile_n_spans = base + layout_.tile_n_spans;
    p.split_tile = base + layout_.split_tile;
    p.split_span = base + layout_.split_span;
    p.token_partial_begin = base + layout_.token_partial_begin;
    p.tc_tile_token_begin = base + layout_.tc_tile_token_begin;
    p.tc_tile_n_tokens = base + layout_.tc_tile_n_tokens;
    p.n_tokens = layout_.n_tokens;
    p.n_seqs = layout_.n_seqs;
    p.n_logit_rows = layout_.n_logit_rows;
    p.n_tiles = layout_.n_tiles;
    p.n_split_items = layout_.n_split_items;
    p.n_partials = layout_.n_partials;
    p.max_tile_tokens = layout_.max_tile_tokens;
    p.n_tc_tiles = layout_.n_tc_tiles;
    have_plan_ = true;
  }

  void embed(const Tensor& table, Tensor& out) override {
    require_plan("embed");
    TERN_CHECK_MSG(is_device(table) && is_device(out), "embed: tensors must be on the CUDA device");
    TERN_CHECK_MSG(matmul_supports(table.dtype), "embed: unsupported table dtype");
    TERN_CHECK(out.rows == plan_.n_tokens);
    EmbedArgs& a = queue_->push<EmbedArgs>(OpKind::kEmbed);
    a.table = table.data;
    a.dtype = table.dtype;
    a.cols = table.cols;
    a.table_stride_bytes = table.row_stride;
    a.out = out.f32();
    a.out_stride = f32_stride(out);
    a.n_tokens = plan_.n_tokens;
    a.token_ids = plan_.token_ids;
  }

  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override {
    TERN_CHECK_MSG(is_device(x) && is_device(w) && is_device(out), "rms_norm: tensors must be on the CUDA device");
    // Fuse `x = a + b; rms_norm(x)` (the residual add before a pre-norm) into one launch.
    const float* add_a = nullptr;
    const float* add_b = nullptr;
    int64_t add_a_stride = 0, add_b_stride = 0;
    if (const ElementwiseArgs* prev = queue_->last_if<ElementwiseArgs>(OpKind::kElementwise);
        prev != nullptr && prev->op == ElementwiseOp::kAdd && prev->out == x.f32() && prev->out_stride == f32_stride(x) &&
        prev->rows == x.rows && prev->cols == x.cols) {
      add_a = prev->a;
      add_b = prev->b;
      add_a_stride = prev->a_stride;
      add_b_stride = prev->b_stride;
      queue_->pop();
    }
    RmsNormArgs& a = queue_->push<RmsNormArgs>(OpKind::kRmsNorm);
    a.add_a = add_a;
    a.add_b = add_b;
    a.add_a_stride = add_a_stride;
    a.add_b_stride = add_b_stride;
    a.x = x.f32();
    a.x_stride = f32_stride(x);
    a.w = w.f32();
    a.out = out.f32();
    a.out_stride = f32_stride(out);
    a.rows = x.rows;
    a.cols = x.cols;
    a.eps = eps;
  }

  void matmul(const Tensor& w, const Tensor& x, Tensor& out) override {
    TERN_CHECK_MSG(is_device(w) && is_device(x) && is_device(out), "matmul: tensors must be on the CUDA device");
    TERN_CHECK_MSG(matmul_supports(w.dtype), "matmul: unsupported weight dtype");
    if (tc_gemm_ != nullptr && x.rows >= options_.tc_prefill_min_tokens && tc_matmul_supports(w.dtype)) {
      matmul_tc(w, x, out);
      return;
    }
    // Consecutive products of the same activations by weights of one type and width (q/k/v,
    // gate/up) share one launch. Each row's arithmetic is unchanged (gemv.h), so fused and
    // separate launches give the same bits.
    if (MatmulArgs* prev = queue_->last_if<MatmulArgs>(OpKind::kMatmul); prev != nullptr &&
        prev->n_mats < kMaxFusedMatmuls && prev->tail_mat == 0 && prev->dtype == w.dtype && prev->cols == w.cols &&
        prev->x == x.f32() &&
        prev->n == x.rows && aligned16(prev->w[0], prev->w_stride_bytes[0]) == aligned16(w.data, w.row_stride) &&
        prev->fuse.residual == nullptr && prev->fuse.glu_out == nullptr) {
      bool distinct = true;
      for (int m = 0; m < prev->n_mats; ++m) distinct = distinct && prev->y[m] != out.f32();
      // A fused prologue's inputs must stay untouched while the launch's blocks read them.
      distinct = distinct && prologue_untouched(*prev, out_rows(out, x.rows));
      if (distinct) {
        add_matrix(*prev, w, out);
        return;
      }
    }
    // A q6_k product after a q4_k launch of the same activations (Q4_K_M's v after q+k) joins it
    // as its tail (MatmulArgs::tail_mat) where one multi-row kernel takes both; every row keeps
    // its type's arithmetic, so the bits are those of two launches.
    if (MatmulArgs* prev = queue_->last_if<MatmulArgs>(OpKind::kMatmul);
        gemv_mixed_ && prev != nullptr && prev->n_mats < kMaxFusedMatmuls && prev->tail_mat == 0 &&
        prev->dtype == DType::Q4_K && w.dtype == DType::Q6_K && prev->cols == w.cols && prev->x == x.f32() &&
        prev->n == 1 && x.rows == 1 && prev->fuse.residual == nullptr && prev->fuse.glu_out == nullptr &&
        prev->fuse.concurrent == 0 && prev->y[0] != out.f32() &&
        (prev->n_mats < 2 || prev->y[1] != out.f32()) &&
        (prev->gemv_path == static_cast<int32_t>(GemvPath::kAuto) ||
         prev->gemv_path == static_cast<int32_t>(GemvPath::kRows) ||
         prev->gemv_path == static_cast<int32_t>(GemvPath::kStream) ||
         prev->gemv_path == static_cast<int32_t>(GemvPath::kPrev)) &&
        prologue_untouched(*prev, out_rows(out, x.rows))) {
      MatmulArgs joined = *prev;
      joined.tail_mat = joined.n_mats;
      joined.tail_dtype = w.dtype;
      add_matrix(joined, w, out);
      if (gemv_rows_mixed_supports(joined)) {
        *prev = joined;
        ++gemv_mixed_joins_;
        return;
      }
    }
    // Many activation rows: the tensor-core kernel's scratch (matmul_qmma.h; launch_matmul sends
    // the product there where that kernel handles the weight). Reserved before the record is
    // pushed: growing the buffer flushes the queue. Where the device has no room for it, the
    // product stays on the GEMV, which gives the same bits.
    const int qmma_min =
        static_cast<int64_t>(w.bytes()) >= kQmmaLargeWeightBytes ? qmma_min_tokens_ : qmma_min_tokens_small_;
    bool qmma = qmma_min > 0 && x.rows >= qmma_min && qmma_supports(w.dtype);
    if (qmma) {
      try {
        reserve(qmma_x_, qmma_scratch_bytes(x.rows, w.cols));
      } catch (const OutOfMemory&) {
        qmma = false;
      }
    }
    GemvFusion fuse{};
    if (fuse_gemv_) {
      fuse = take_gemv_prologue(*queue_, w, x, out, fuse_swiglu_ ? static_cast<int*>(fusion_counter_->data()) : nullptr);
      if (fuse.prologue != GemvPrologue::kNone) ++gemv_fusions_;
    }
    MatmulArgs& a = queue_->push<MatmulArgs>(OpKind::kMatmul);
    a.fuse = fuse;
    a.dtype = w.dtype;
    a.cols = w.cols;
    a.x = x.f32();
    a.n = x.rows;
    a.max_smem_bytes = options_.gemv_smem_cap > 0 ? std::min(options_.gemv_smem_cap, max_smem_bytes_) : max_smem_bytes_;
    a.n_sm = n_sm_;
    a.gemv_path = static_cast<int32_t>(gemv_path_);
    a.stage_bytes_per_warp = gemv_stage_bytes_;
    a.gemv_rows_per_step = gemv_rows_per_step_;
    a.gemv_parts_per_row = gemv_parts_per_row_;
    a.gemv_float_kernel = gemv_float_kernel_;
    a.gemv_float_rows = gemv_float_rows_;
    a.gemv_float_unroll = gemv_float_unroll_;
    a.gemv_float_blocks = gemv_float_blocks_;
    a.gemv_float_pipe = gemv_float_pipe_;
    a.gemv_norm_preload = gemv_norm_preload_;
    a.gemv_stream_blocks = gemv_stream_blocks_;
    a.x_bits = act_bits_;
    if (qmma) {
      a.qmma_x = static_cast<uint8_t*>(qmma_x_->data());
      ++qmma_matmuls_;
    }
    a.gemv_float_counter = gemv_float_counter_ != nullptr ? static_cast<int*>(gemv_float_counter_->data()) : nullptr;
    add_matrix(a, w, out);
  }

  void add_bias(Tensor& x, const Tensor& bias) override { elementwise(ElementwiseOp::kAddBias, x, bias, x); }
  void add(const Tensor& a, const Tensor& b, Tensor& out) override { elementwise(ElementwiseOp::kAdd, a, b, out); }
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) override {
    elementwise(ElementwiseOp::kSwiglu, gate, up, out);
  }

  void rope(Tensor& x, int n_heads, int head_dim, const RopeParams& rope) override {
    require_plan("rope");
    TERN_CHECK_MSG(is_device(x) && is_device(rope.inv_freq), "rope: tensors must be on the CUDA device");
    TERN_CHECK(x.rows == plan_.n_tokens);
    // The second rope of a layer (k after q) joins the first one's launch (rope_fusion_plan.h).
    if (join_second_rope(*queue_, plan_, x, n_heads, head_dim, rope)) return;
    RopeArgs& a = queue_->push<RopeArgs>(OpKind::kRope);
    a.x = x.f32();
    a.x_stride = f32_stride(x);
    a.n_tokens = plan_.n_tokens;
    a.n_heads = n_heads;
    a.head_dim = head_dim;
    a.n_rot = rope.n_rot;
    a.neox = rope.neox ? 1 : 0;
    a.mscale = rope.mscale;
    a.inv_freq = rope.inv_freq.f32();
    a.positions = plan_.positions;
  }

  void kv_write(const Tensor& k, const Tensor& v, KvLayerView& kv) override {
    require_plan("kv_write");
    TERN_CHECK_MSG(is_device(k) && is_device(v) && is_device(kv.k) && is_device(kv.v),
                   "kv_write: tensors must be on the CUDA device");
    TERN_CHECK_MSG(kv.k.dtype == DType::F16 || kv.k.dtype == DType::F32, "kv_write: cache must be f16 or f32");
    TERN_CHECK(k.rows == plan_.n_tokens);
    // The layer's rope (q and k) usually comes right before: the cache write joins its launch
    // (RopeArgs::kv, rope_fusion_plan.h), saving a kernel per layer.
    if (RopeArgs* rope = rope_taking_kv_write(*queue_, plan_, k, v); rope != nullptr) {
      fill_kv_write(k, v, kv, rope->kv);
      ++fused_kv_writes_;
      return;
    }
    fill_kv_write(k, v, kv, queue_->push<KvWriteArgs>(OpKind::kKvWrite));
  }

  void attention(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, Tensor& out) override {
    require_plan("attention");
    TERN_CHECK_MSG(is_device(q) && is_device(out) && is_device(kv.k) && is_device(kv.v),
                   "attention: tensors must be on the CUDA device");
    TERN_CHECK_MSG(kv.k.dtype == DType::F16 || kv.k.dtype == DType::F32, "attention: cache must be f16 or f32");
    TERN_CHECK_MSG(p.head_dim <= kAttnMaxHeadDim && p.head_dim % 8 == 0,
                   "attention: CUDA supports head_dim <= 256 and a multiple of 8");
    TERN_CHECK(q.rows == plan_.n_tokens);
    AttentionArgs a;
    std::memset(&a, 0, sizeof(a));
    fill_attention(q, kv, p, out, a);
    // The invariant tensor-core attention (attention_mma.h): every step of a supported shape, so
    // the model's rows stay on one contract.
    if (attention_mma_ != 0 && attention_mma_supports(a)) {
      ++mma_attentions_;
      if (attention_mma_ == 3 || (attention_mma_ == 1 && attention_mma_split(a, n_sm_))) {
        a.tc = kAttnMmaSplit;
        a.split = 1;
        a.tc_variant = attention_mma_stages_ != 0 ? attention_mma_stages_ : attention_mma_v_stages(a, n_sm_);
        reserve_partials(a);
        ++mma_split_attentions_;
      } else {
        a.tc = kAttnMmaFused;
      }
      AttentionArgs& rec = queue_->push<AttentionArgs>(OpKind::kAttention);
      std::memcpy(&rec, &a, sizeof(a));
      return;
    }
    // The opt-in tensor-core prefill attention (attention_tc.h) for large steps it supports.
    if (tc_attention_ && plan_.n_tokens >= options_.tc_prefill_min_tokens && attention_tc_supports(a)) {
      a.tc = 1;
      ++tc_attentions_;
      AttentionArgs& rec = queue_->push<AttentionArgs>(OpKind::kAttention);
      std::memcpy(&rec, &a, sizeof(a));
      return;
    }
    // The register-tiled kernel (attention_tiled.h) for large steps: attention.h's bits, computed
    // like a GEMM; its split mode where its blocks alone would not fill the GPU.
    if (attention_tiled_min_tokens_ > 0 && plan_.n_tokens >= attention_tiled_min_tokens_ && attention_tiled_supports(a)) {
      plan_attention_tiled(a, layout_.max_position, n_sm_, kMaxTiledPartialsBytes);
      if (a.split) {
        reserve_partials(a);
        ++tiled_split_attentions_;
      }
      ++tiled_attentions_;
      AttentionArgs& rec = queue_->push<AttentionArgs>(OpKind::kAttention);
      std::memcpy(&rec, &a, sizeof(a));
      return;
    }
    // Two K/V chunks in flight per block where they fit the shared memory, else one.
    a.kv_stages = 2;
    if (attention_smem_bytes(a) > static_cast<size_t>(max_smem_bytes_)) a.kv_stages = 1;
    TERN_CHECK_MSG(attention_smem_bytes(a) <= static_cast<size_t>(max_smem_bytes_),
                   "attention: tile does not fit the device's shared memory");
    // Split (flash-decoding) when tiles alone cannot fill the GPU; the two modes give
    // bit-identical results (attention.h), so this choice is free to depend on the batch.
    const int64_t tile_blocks = int64_t{plan_.n_tiles} * p.n_kv_heads;
    bool split = tile_blocks < 4 * int64_t{n_sm_};
    if (options_.attention_split == AttentionSplit::kAlways) split = true;
    if (options_.attention_split == AttentionSplit::kNever) split = false;
    if (split) {
      a.split = 1;
      const int kernel = attention_span_ >= 0 ? attention_span_ : default_span_kernel(p.head_dim, kv.k.dtype, attention_split_ring_);
      if (kernel > 0) {  // else the chunk kernel
        a.chunk_split = chunk_split(p.n_kv_heads, kernel);
        plan_attention_span(a, n_sm_, max_smem_bytes_, attention_span_stages_, kernel);
      }
      reserve_partials(a);
      if (a.span_kernel > 0 && a.chunk_split == 0 && fold_merge(a)) plan_fold_merge(a);
      if (a.chunk_split > 0) ++chunk_splits_;
      // Early K/V copies compare each row's slot with the step's kv_slots: small steps only.
      a.early_kv = attention_early_kv_ && plan_.n_tokens <= 16 ? 1 : 0;
      // The compact decode kernel (attention_compact.cu): the same records; not for a kernel
      // picked explicitly (TERN_CUDA_ATTN_SPAN: it runs as asked).
      if (attention_compact_ != 0 && attention_span_ < 0 && attention_compact_applies(a, layout_.max_tile_tokens)) {
        a.span_kernel |= kSpanCompact;
        a.early_kv = 0;
        ++compact_attentions_;
        // 2: with the layer's rope launch taken in (the fused decode's rope, attention_fused.cuh);
        // 3: so at head_dim <= 64 only, where it measured faster (backend_settings.h).
        const bool rope_in = attention_compact_ == 2 || (attention_compact_ == 3 && a.head_dim <= 64);
        if (rope_in && take_rope_into_attention(*queue_, plan_, a)) ++fused_attentions_;
      }
      const bool compact = (a.span_kernel & kSpanCompact) != 0;
      if (a.chunk_split > 0 && !compact && attention_fused_decode_ != 0) fuse_decode(a);
      if ((a.fused & kAttnFusedRope) != 0 && a.early_kv != 0) ++fused_early_kv_;
    }
    AttentionArgs& rec = queue_->push<AttentionArgs>(OpKind::kAttention);
    std::memcpy(&rec, &a, sizeof(a));
  }

  // Points a.partials at a buffer of attention_partials_bytes(a). Growing frees the old buffer,
  // which flushes the records that still use it.
  void reserve_partials(AttentionArgs& a) {
    const size_t need = attention_partials_bytes(a);
    if (partials_ == nullptr || partials_->bytes() < need) {
      partials_ = alloc(std::max({need, 2 * (partials_ ? partials_->bytes() : 0), size_t{1} << 20}));
    }
    a.partials = static_cast<float*>(partials_->data());
  }

  void set_attention_split_ring(int split_ring) { attention_split_ring_ = std::clamp(split_ring, 0, kMaxSplitRing); }
  // A legacy backend (an old device, or legacy_gemv) stays legacy: sm_90 kernels may be missing.
  void set_gemv_path(GemvPath path) {
    if (gemv_path_ != GemvPath::kLegacy && path != GemvPath::kLegacy) gemv_path_ = path;
  }
  void set_act_bits(int bits) { act_bits_ = bits; }
  void set_small_gemv(int float_pipe, int norm_preload) {
    gemv_float_pipe_ = float_pipe;
    gemv_norm_preload_ = norm_preload;
  }

  // Greedy sampling on the device (argmax.cu): two small kernels reduce the rows to one 64-bit key
  // each, and only the keys cross to the host.
  void argmax_rows(const Tensor& x, int32_t* host_ids) override {
    TERN_CHECK_MSG(is_device(x), "argmax_rows: tensor must be on the CUDA device");
    TERN_CHECK(x.dtype == DType::F32 && x.rows > 0 && x.cols > 0);
    const int rows = static_cast<int>(x.rows), blocks = argmax_blocks_per_row(x.cols);
    // Reserving first: growing the buffer flushes records that still point into the old one.
    reserve(argmax_keys_, sizeof(unsigned long long) * static_cast<size_t>(rows) * (blocks + 1));
    auto* keys = static_cast<unsigned long long*>(argmax_keys_->data());
    ArgmaxArgs& a = queue_->push<ArgmaxArgs>(OpKind::kArgmaxRows);
    a.x = x.f32();
    a.x_stride = f32_stride(x);
    a.cols = x.cols;
    a.rows = rows;
    a.blocks_per_row = blocks;
    a.keys = keys;
    a.partials = keys + rows;
    std::vector<unsigned long long> host(static_cast<size_t>(rows));
    copy_to_host(Tensor::view(keys, DType::I32, 1, 2 * int64_t{rows}, Device::kCuda), host.data());
    for (int r = 0; r < rows; ++r) host_ids[r] = decode_argmax_key(host[r]);
  }

  // Sampling candidates on the device (top_candidates.cu): the rows' best entries, flags and
  // normalizers cross to the host, a few KiB per row instead of the vocabulary.
  void top_candidates(const Tensor& x, const CandidateRows& out) override {
    TERN_CHECK_MSG(is_device(x), "top_candidates: tensor must be on the CUDA device");
    TERN_CHECK(x.dtype == DType::F32 && x.rows > 0 && x.cols > 0 && x.rows == out.rows);
    TERN_CHECK(out.count >= 1 && out.count <= kMaxCandidates && out.count <= x.cols);
    const int rows = out.rows, count = out.count;
    const TopCandidatesShape shape = top_candidates_shape(x.cols, count);
    const bool sums = out.exp_sums != nullptr;
    // Device layout of the results, copied back in one piece: [rows, parts] doubles, then ids,
    // logits and flags.
    const size_t partials_bytes = sizeof(double) * static_cast<size_t>(rows) * shape.parts;
    const size_t entries = static_cast<size_t>(rows) * count;
    const size_t out_bytes = partials_bytes + entries * (sizeof(int32_t) + sizeof(float)) + sizeof(uint32_t) * rows;
    // Reserving first: growing a buffer flushes records that still point into the old one.
    reserve(topc_out_, out_bytes);
    reserve(topc_scratch_, (sizeof(unsigned long long) * shape.cap + sizeof(uint32_t)) * static_cast<size_t>(rows) * shape.parts);
    if (sums) {
      reserve(topc_temperatures_, sizeof(float) * static_cast<size_t>(rows));
      // Stream-ordered before the launch below; the staging is free again: the previous call
      // waited for the stream.
      void* staging = topc_staging_.reserve(sizeof(float) * static_cast<size_t>(rows));
      std::memcpy(staging, out.temperatures, sizeof(float) * static_cast<size_t>(rows));
      TERN_CUDA_CHECK(cudaMemcpyAsync(topc_temperatures_->data(), staging, sizeof(float) * static_cast<size_t>(rows),
                                      cudaMemcpyHostToDevice, stream_));
    }
    auto* base = static_cast<unsigned char*>(topc_out_->data());
    auto* scratch = static_cast<unsigned long long*>(topc_scratch_->data());
    TopCandidatesArgs& a = queue_->push<TopCandidatesArgs>(OpKind::kTopCandidates);
    a.x = x.f32();
    a.x_stride = f32_stride(x);
    a.cols = x.cols;
    a.part_cols = shape.part_cols;
    a.rows = rows;
    a.count = count;
    a.cap = shape.cap;
    a.parts = shape.parts;
    a.partial_keys = scratch;
    a.partial_flags = reinterpret_cast<uint32_t*>(scratch + static_cast<size_t>(rows) * shape.parts * shape.cap);
    a.exp_partials = reinterpret_cast<double*>(base);
    a.ids = reinterpret_cast<int32_t*>(base + partials_bytes);
    a.logits = reinterpret_cast<float*>(base + partials_bytes + entries * sizeof(int32_t));
    a.flags = reinterpret_cast<uint32_t*>(base + partials_bytes + entries * (sizeof(int32_t) + sizeof(float)));
    a.temperatures = sums ? static_cast<const float*>(topc_temperatures_->data()) : nullptr;
    topc_host_.resize((out_bytes + 3) / 4);
    copy_to_host(Tensor::view(base, DType::I32, 1, static_cast<int64_t>(topc_host_.size()), Device::kCuda),
                 topc_host_.data());
    const auto* host = reinterpret_cast<const unsigned char*>(topc_host_.data());
    std::memcpy(out.ids, host + partials_bytes, entries * sizeof(int32_t));
    std::memcpy(out.logits, host + partials_bytes + entries * sizeof(int32_t), entries * sizeof(float));
    std::memcpy(out.flags, host + partials_bytes + entries * (sizeof(int32_t) + sizeof(float)), sizeof(uint32_t) * rows);
    if (sums) {
      for (int r = 0; r < rows; ++r) {
        double sum = 0.0;
        if (out.temperatures[r] > 0.0f) {
          for (int p = 0; p < shape.parts; ++p) {
            double v = 0.0;
            std::memcpy(&v, host + sizeof(double) * (static_cast<size_t>(r) * shape.parts + p), sizeof(v));
            sum += v;
          }
        }
        out.exp_sums[r] = sum;
      }
    }
  }

  void gather_logit_rows(const Tensor& x, Tensor& out) override {
    require_plan("gather_logit_rows");
    TERN_CHECK_MSG(is_device(x) && is_device(out), "gather_logit_rows: tensors must be on the CUDA device");
    TERN_CHECK(out.rows == plan_.n_logit_rows);
    GatherRowsArgs& a = queue_->push<GatherRowsArgs>(OpKind::kGatherRows);
    a.x = x.f32();
    a.x_stride = f32_stride(x);
    a.out = out.f32();
    a.out_stride = f32_stride(out);
    a.cols = x.cols;
    a.n_rows = plan_.n_logit_rows;
    a.rows = plan_.logit_rows;
  }

 private:
  void require_plan(const char* op) const { TERN_CHECK_MSG(have_plan_, op); }

  // Assigns field by field: `a` is a zero-filled record, whose padding must stay zero.
  void fill_kv_write(const Tensor& k, const Tensor& v, const KvLayerView& kv, KvWriteArgs& a) const {
    a.k = k.f32();
    a.v = v.f32();
    a.k_stride = f32_stride(k);
    a.v_stride = f32_stride(v);
    a.k_cache = kv.k.data;
    a.v_cache = kv.v.data;
    const size_t elem = kv.k.dtype == DType::F16 ? 2 : 4;
    a.k_cache_stride = static_cast<int64_t>(kv.k.row_stride / elem);
    a.v_cache_stride = static_cast<int64_t>(kv.v.row_stride / elem);
    a.cache_dtype = kv.k.dtype;
    a.cols = k.cols;
    a.n_tokens = plan_.n_tokens;
    a.kv_slots = plan_.kv_slots;
  }

  static bool aligned16(const void* p, size_t stride) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0 && stride % 16 == 0;
  }
  static void add_matrix(MatmulArgs& a, const Tensor& w, const Tensor& out) {
    const int m = a.n_mats++;
    a.w[m] = w.data;
    a.w_stride_bytes[m] = w.row_stride;
    a.rows[m] = w.rows;
    a.y[m] = out.f32();
  }

  // Grows a scratch buffer to at least `bytes`. Freeing the old one first flushes the queue, so
  // pending records that point into it run before it goes.
  void reserve(std::unique_ptr<Buffer>& buf, size_t bytes) {
    if (buf != nullptr && buf->bytes() >= bytes) return;
    buf.reset();
    buf = alloc(bytes);
  }

  // Records a tensor-core product (matmul_tc.h). Fusion does not apply (each weight is its own
  // GEMM), but a product right after another one of the same x reuses its bf16 copy of x.
  void matmul_tc(const Tensor& w, const Tensor& x, const Tensor& out) {
    const int64_t tile_rows = tc_weight_tile_rows(w.rows, w.cols);
    reserve(tc_x16_, sizeof(uint16_t) * static_cast<size_t>(x.rows * x.cols));
    if (!tc_weight_in_place(w.dtype)) reserve(tc_w16_, sizeof(uint16_t) * static_cast<size_t>(tile_rows * w.cols));
    bool convert_x = true;
    if (const TcMatmulArgs* prev = queue_->last_if<TcMatmulArgs>(OpKind::kMatmulTc);
        prev != nullptr && prev->mm.x == x.f32() && prev->mm.n == x.rows && prev->mm.cols == x.cols &&
        disjoint_rows(prev->mm.y[0], prev->mm.rows[0], prev->mm.rows[0], x.f32(), x.cols, x.cols, x.rows)) {
      convert_x = false;
    }
    TcMatmulArgs& a = queue_->push<TcMatmulArgs>(OpKind::kMatmulTc);
    a.mm.dtype = w.dtype;
    a.mm.cols = w.cols;
    a.mm.x = x.f32();
    a.mm.n = x.rows;
    a.mm.max_smem_bytes = max_smem_bytes_;
    a.mm.n_sm = n_sm_;
    add_matrix(a.mm, w, out);
    a.gemm = tc_gemm_.get();
    a.x16 = static_cast<uint16_t*>(tc_x16_->data());
    a.w16 = tc_w16_ != nullptr ? static_cast<uint16_t*>(tc_w16_->data()) : nullptr;
    a.w16_rows = tile_rows;
    a.convert_x = convert_x ? 1 : 0;
    prepare_matmul_tc(a);
    ++tc_matmuls_;
  }

  void elementwise(ElementwiseOp op, const Tensor& x, const Tensor& y, const Tensor& out) {
    TERN_CHECK_MSG(is_device(x) && is_device(y) && is_device(out), "elementwise op: tensors must be on the CUDA device");
    if (fuse_gemv_ && op == ElementwiseOp::kAdd && take_residual_add(*queue_, x, y, out)) {
      ++gemv_fusions_;
      return;
    }
    if ((fuse_swiglu_epilogue_ || fuse_float_swiglu_epilogue_) && op == ElementwiseOp::kSwiglu &&
        take_swiglu_epilogue(*queue_, x, y, out, fuse_swiglu_epilogue_)) {
      ++gemv_fusions_;
      return;
    }
    ElementwiseArgs& a = queue_->push<ElementwiseArgs>(OpKind::kElementwise);
    a.op = op;
    a.a = x.f32();
    a.a_stride = f32_stride(x);
    a.b = y.f32();
    a.b_stride = f32_stride(y);
    a.out = out.f32();
    a.out_stride = f32_stride(out);
    a.rows = x.rows;
    a.cols = x.cols;
  }

  // Whether the span blocks merge their own partials (attention_span_merge.cuh) or the merge
  // kernel does: same bits, so the choice may follow the batch. One span per tile: the block
  // merges straight from shared memory, no counter, no round trip (H200, 8B shape at ctx 64:
  // 10.1 -> 8.3 us/layer). Several spans: the counter, the fences and the reload put ~3 round
  // trips behind the last block, which measured slower than the merge kernel's PDL hand-off
  // (ctx 1k: 23.0 -> 25.0 us/layer), so mode 1 leaves those to the merge kernel unless
  // TERN_CUDA_ATTN_FOLD_MAX_SPANS raises the limit (and then only for few queries per block).
  bool fold_merge(const AttentionArgs& a) const {
    if (attention_fold_merge_ == 0) return false;
    if (attention_fold_merge_ == 2 || layout_.max_tile_spans == 1) return true;
    return layout_.max_tile_spans <= attention_fold_max_spans_ && layout_.max_tile_tokens * a.heads_per_block <= 8;
  }
  // Chunks per block of the two-chunk span kernels (attention.h, chunk split; same bits): the
  // option or TERN_CUDA_ATTN_CHUNK_SPLIT, else per plan with the default kernel only (a kernel
  // picked explicitly runs as asked, so the kernel tests compare what they name), never where
  // the folded merge was asked for everywhere or for several spans (it needs whole spans).
  int chunk_split(int n_kv_heads, int span_kernel) const {
    if (attention_chunk_split_ >= 0) return attention_chunk_split_;
    if (attention_span_ >= 0 || attention_fold_merge_ == 2 || attention_fold_max_spans_ > 1) return 0;
    return default_chunk_split(layout_.n_split_items, layout_.max_tile_spans, layout_.max_position, n_kv_heads, n_sm_,
                               span_kernel);
  }
  // The counters of a launch whose blocks count themselves done per (tile, KV head x head slice):
  // the folded merge and the fused decode. Zero-filled on allocation; every launch leaves its
  // counters at zero again.
  int* merge_counters(const AttentionArgs& a) {
    const int group = a.n_heads / a.n_kv_heads;
    const int n_slices = (group + a.heads_per_block - 1) / a.heads_per_block;
    const size_t need = sizeof(int) * static_cast<size_t>(plan_.n_tiles) * a.n_kv_heads * n_slices;
    if (merge_counters_ == nullptr || merge_counters_->bytes() < need) {
      merge_counters_ = alloc(std::max({need, 2 * (merge_counters_ ? merge_counters_->bytes() : 0), size_t{4096}}));
    }
    return static_cast<int*>(merge_counters_->data());
  }
  void plan_fold_merge(AttentionArgs& a) {
    a.fold_merge = 1;
    a.merge_counters = merge_counters(a);
    ++folded_merges_;
  }
  // Fused decode (attention.h; attention_fused.cuh): a chunk-split attention in a step of one
  // token per sequence takes the layer's rope launch (the record right before it: the rope of
  // this q and of k, with the K/V write into this attention's cache) into its own launch. The
  // fused blocks read the un-rotated q, k and v while they write out: out must not overlap them.
  // attention_fused_decode_ (kAttnFusedRope) says whether it may.
  void fuse_decode(AttentionArgs& a) {
    if (layout_.max_tile_tokens != 1) return;
    if ((attention_fused_decode_ & kAttnFusedRope) != 0 && take_rope_into_attention(*queue_, plan_, a)) {
      // The early K/V copies of the unfused launch defer the rows the step writes and copy them
      // after the wait, from a cache this launch writes itself: not with the fused rope. Its own
      // form (attention.h "early K/V copies with the fused rope") has nothing to defer: the kernel
      // before is the q/k/v projection (the rope launch, which wrote the cache, is this one now).
      // (early_kv 2 keeps the rotation factors in the block's score buffer: one token per tile.)
      a.early_kv = attention_fused_early_kv_;
    }
    if (a.fused != 0) ++fused_attentions_;
  }

  void fill_attention(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, const Tensor& out,
                      AttentionArgs& a) const {
    const size_t elem = kv.k.dtype == DType::F16 ? 2 : 4;
    a.q = q.f32();
    a.q_stride = f32_stride(q);
    a.out = out.f32();
    a.out_stride = f32_stride(out);
    a.k_cache = kv.k.data;
    a.v_cache = kv.v.data;
    a.k_cache_stride = static_cast<int64_t>(kv.k.row_stride / elem);
    a.v_cache_stride = static_cast<int64_t>(kv.v.row_stride / elem);
    a.kv_dtype = kv.k.dtype;
    a.block_tokens = kv.block_tokens;
    a.n_heads = p.n_heads;
    a.n_kv_heads = p.n_kv_heads;
    a.head_dim = p.head_dim;
    a.scale = p.scale;
    a.sliding_window = p.sliding_window;
    a.softcap = p.logit_softcap;
    a.row_copy = attention_row_copy_ ? 1 : 0;
    a.tc_variant = attention_tc_variant_;
    a.plan = plan_;
  }

  CudaBackendOptions options_;
  int n_sm_;
  int max_smem_bytes_;
  GemvPath gemv_path_;     // GEMV kernel family (CudaBackendOptions::legacy_gemv)
  int gemv_stage_bytes_;   // bulk GEMV pipeline bytes per warp, 0: default
  int gemv_rows_per_step_;  // GemvPath::kRows shape overrides (0: per shape)
  int gemv_parts_per_row_;
  cudaStream_t stream_;
  std::shared_ptr<StepQueue> queue_;
  cudaEvent_t plan_uploaded_ = nullptr;
  std::vector<int32_t> plan_words_;
  PinnedBuffer plan_staging_, host_staging_;
  std::unique_ptr<Buffer> plan_dev_, partials_;
  std::unique_ptr<Buffer> merge_counters_;  // the folded span merge's counters (attention_span_merge.cuh)
  std::unique_ptr<TcGemm> tc_gemm_;          // set when the tensor-core prefill is on
  std::unique_ptr<Buffer> tc_x16_, tc_w16_;  // its bf16 activations and weight tile (matmul_tc.h)
  int64_t tc_matmuls_ = 0;
  bool tc_attention_ = false;  // tensor-core prefill attention on (with tc_gemm_)
  int64_t tc_attentions_ = 0;
  std::unique_ptr<Buffer> topc_out_, topc_scratch_, topc_temperatures_;  // top_candidates
  PinnedBuffer topc_staging_;                                              // its temperatures
  std::vector<uint32_t> topc_host_;                                        // its results
  std::unique_ptr<Buffer> argmax_keys_;  // argmax_rows: [rows] keys, then [rows, blocks] partials
  int64_t fused_kv_writes_ = 0;  // kv_writes that joined the rope's launch
  int64_t fused_attentions_ = 0;  // attention ops that took the rope launch in (fuse_decode)
  bool attention_row_copy_ = false;  // TERN_CUDA_ATTN_ROW_COPY=1
  int attention_tc_variant_ = 0;     // TERN_CUDA_ATTN_TC_VARIANT (attention_tc.h)
  int attention_span_ = -1;          // split-mode kernel (attention_span_kernel); -1: per shape
  int attention_span_stages_ = 3;    // TERN_CUDA_ATTN_SPAN_STAGES
  int attention_fold_merge_ = 1;     // 0 never, 1 where faster, 2 always (attention_fold_merge)
  int attention_fold_max_spans_ = 1;
  int attention_chunk_split_ = -1;   // TERN_CUDA_ATTN_CHUNK_SPLIT / option; -1: default_chunk_split
  bool attention_early_kv_ = false;  // TERN_CUDA_ATTN_EARLY_KV / option
  int attention_fused_early_kv_ = 0;  // AttentionArgs::early_kv with the fused rope (TERN_CUDA_ATTN_FUSED_EARLY_KV)
  int attention_split_ring_ = kDefaultSplitRing;  // TERN_CUDA_ATTN_SPLIT_RING / option
  int attention_fused_decode_ = 0;  // AttentionArgs::fused flags (TERN_CUDA_ATTN_FUSED / option)
  int attention_compact_ = 0;       // the compact decode kernel, 0 off (TERN_CUDA_ATTN_COMPACT)
  int64_t compact_attentions_ = 0;
  int64_t fused_early_kv_ = 0;  // fused attention ops with their first K/V copies before the PDL wait
  int64_t folded_merges_ = 0;
  int64_t chunk_splits_ = 0;
  bool fuse_gemv_ = false;           // CudaBackendOptions::fuse_gemv, not on GemvPath::kLegacy
  bool fuse_swiglu_ = false;         // and CudaBackendOptions::fuse_swiglu
  bool fuse_swiglu_epilogue_ = false;  // and CudaBackendOptions::fuse_swiglu_epilogue
  bool fuse_float_swiglu_epilogue_ = false;  // and CudaBackendOptions::fuse_float_swiglu_epilogue
  int gemv_float_kernel_ = 0;  // MatmulArgs::gemv_float_kernel and the streamed kernel's shape
  int gemv_float_rows_ = 0;
  int gemv_float_unroll_ = 0;
  int gemv_float_blocks_ = 0;
  int gemv_float_pipe_ = 0;     // MatmulArgs::gemv_float_pipe / gemv_norm_preload
  int gemv_norm_preload_ = 0;
  int gemv_stream_blocks_ = 0;  // MatmulArgs::gemv_stream_blocks
  bool gemv_mixed_ = false;     // CudaBackendOptions::gemv_mixed (mixed-type launches)
  int64_t gemv_mixed_joins_ = 0;
  int act_bits_ = kDefaultActBits;  // MatmulArgs::x_bits of every quantized product
  int qmma_min_tokens_ = 0;         // BackendSettings::qmma_min_tokens (0: never)
  int qmma_min_tokens_small_ = 0;   // BackendSettings::qmma_min_tokens_small (0: never)
  int attention_mma_ = 0;           // the invariant tensor-core attention (BackendSettings::attention_mma)
  int attention_mma_stages_ = 0;    // its split mode's V stages (BackendSettings::attention_mma_stages)
  int64_t mma_attentions_ = 0, mma_split_attentions_ = 0;
  int attention_tiled_min_tokens_ = 0;  // BackendSettings::attention_tiled_min_tokens (0: never)
  int64_t tiled_attentions_ = 0, tiled_split_attentions_ = 0;
  // The tiled kernel's split mode keeps its span records under this (else it runs fused).
  static constexpr size_t kMaxTiledPartialsBytes = size_t{256} << 20;
  std::unique_ptr<Buffer> qmma_x_;  // MatmulArgs::qmma_x
  int64_t qmma_matmuls_ = 0;
  std::unique_ptr<Buffer> fusion_counter_;  // GemvFusion::done_blocks
  std::unique_ptr<Buffer> gemv_float_counter_;  // MatmulArgs::gemv_float_counter (dynamic units)
  int64_t gemv_fusions_ = 0;
  PackedPlanLayout layout_;
  DevicePlan plan_{};
  bool have_plan_ = false;
  KvTransfer kv_transfer_{stream_};  // copy_from_host_n / copy_to_host_n (after stream_)
};

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

Result<std::unique_ptr<Backend>> create_backend(const CudaBackendOptions& options) {
  const int n = device_count();
  if (options.device < 0 || options.device >= n) {
    return error("cuda: device " + std::to_string(options.device) + " requested, but " + std::to_string(n) +
                 " CUDA device(s) are available");
  }
  if (cudaSetDevice(options.device) != cudaSuccess) {
    return error(std::string("cuda: cannot use device ") + std::to_string(options.device) + ": " +
                 cudaGetErrorString(cudaGetLastError()));
  }
  cudaDeviceProp prop{};
  TERN_CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device));
  if (prop.major < 8) {
    return error("cuda: device " + std::to_string(options.device) + " (" + prop.name + ") has compute capability " +
                 std::to_string(prop.major) + "." + std::to_string(prop.minor) + ", expected 8.0 or newer");
  }
  init_matmul(static_cast<int>(prop.sharedMemPerBlockOptin));
  init_attention(static_cast<int>(prop.sharedMemPerBlockOptin));
  init_attention_tc(static_cast<int>(prop.sharedMemPerBlockOptin));
  BackendSettings settings = resolve_settings(options, prop.major, gemv_bulk_compiled());
  // The invariant tensor-core attention where its blocks fit the device (every model shape it
  // supports then takes it, or none does).
  if (!init_attention_mma(static_cast<int>(prop.sharedMemPerBlockOptin))) settings.attention_mma = 0;
  if (!init_attention_tiled(static_cast<int>(prop.sharedMemPerBlockOptin))) settings.attention_tiled_min_tokens = 0;
  std::unique_ptr<TcGemm> tc_gemm;
  if (settings.tc_prefill) {
    if (options.tc_prefill_min_tokens < 1) {
      return error("cuda: tc_prefill_min_tokens: expected >= 1, got " + std::to_string(options.tc_prefill_min_tokens));
    }
    auto g = TcGemm::create();
    if (!g.is_ok()) return g.status();
    tc_gemm = std::move(g).value();
  }
  cudaStream_t stream = nullptr;
  TERN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(options, settings, prop, stream, std::move(tc_gemm)));
}

void set_small_gemv(Backend& backend, int float_pipe, int norm_preload) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  TERN_CHECK_MSG(cuda != nullptr, "set_small_gemv: not a CUDA backend");
  cuda->set_small_gemv(float_pipe, norm_preload);
}

void set_gemv_path(Backend& backend, int path) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  TERN_CHECK_MSG(cuda != nullptr, "set_gemv_path: not a CUDA backend");
  TERN_CHECK_MSG(path >= 0 && path <= static_cast<int>(GemvPath::kPrev), "set_gemv_path: not a GemvPath");
  cuda->set_gemv_path(static_cast<GemvPath>(path));
}

void set_act_bits(Backend& backend, int bits) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  TERN_CHECK_MSG(cuda != nullptr, "set_act_bits: not a CUDA backend");
  TERN_CHECK_MSG(bits == 8 || bits == 16, "set_act_bits: 8 or 16");
  cuda->set_act_bits(bits);
}

void set_attention_split_ring(Backend& backend, int split_ring) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  TERN_CHECK_MSG(cuda != nullptr, "set_attention_split_ring: not a CUDA backend");
  cuda->set_attention_split_ring(split_ring);
}

CudaBackendStats backend_stats(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  TERN_CHECK_MSG(cuda != nullptr, "backend_stats: not a CUDA backend");
  return cuda->stats();
}

}  // namespace tern::cuda
