// Paged causal attention on the device, one kernel for prefill, decode, speculative verify and
// mixed batches (the opt-in tensor-core prefill kernel is attention_tc.h).
//
// Work unit: a tile of up to kAttnTileTokens consecutive plan tokens of one sequence, one KV head
// and up to kAttnMaxHeadsPerBlock of its query heads (larger GQA groups take several slices).
// The context is cut at absolute positions into chunks of kAttnChunkTokens (64), and chunks into
// spans of kAttnSpanChunks (4, i.e. 256 positions). A block streams a chunk's K and V rows
// (through the sequence's block table, 16-byte cp.async copies, the next chunk in flight while
// this one is used) into shared memory once and serves every query of its tile from them.
//
// Per query and chunk, with d split into segments of 8 dimensions:
//   dot_j = pairwise tree, in segment order, of the segment partials  sum_{d in seg} q_d k_jd
//           (fmaf in d order; the tree is the butterfly over the power of two >= head_dim / 8
//           lanes, missing segments adding +0)
//   s_j = cap? * dot_j * scale                                   for valid j (window, causality)
//   m = max_j s_j;  p_j = __expf(s_j - m);  l = butterfly sum of (p_j + p_{j+32});
//   a_d = sum_j p_j v_jd, fmaf in j order over the query's valid j
// A span's partial folds its chunks in chunk order, starting from (-inf, 0, 0), skipping chunks
// with no valid position:
//   M' = max(M, m);  sA = __expf(M - M');  sB = __expf(m - M');
//   L' = L sA + l sB;  A' = A sA + a sB;
// and the query's result folds its span partials, in span order, with the same expressions,
// from (-inf, 0, 0), skipping empty spans:  out = A / L.
// A query's result depends on its own position, its sequence's KV and nothing else: not on the
// tile it shares, the number of tokens in the step or the mode below, so attention is
// batch-invariant bit for bit (decode rows equal prefill rows).
//
// Two modes compute the same thing:
//   fused: one block per (tile, head slice) walks all spans and folds them as it goes, the
//          running A kept in the output rows (prefill: many tiles keep the GPU busy);
//   split: one block per (tile, span, head slice) writes its span partial to global memory and
//          a merge kernel folds them (decode: few tokens, long contexts; flash-decoding: a 32k
//          context is 128 spans x the KV heads, enough blocks for every SM).
// Large steps may take the register-tiled kernel instead (attention_tiled.h, opt-in): the same
// float sequence per query, a thread forming 4 x 4 (query, key) pairs, in either mode.
//
// Split mode has two kernels computing the same bits: the chunk kernel (attention.cu; 128 threads,
// one chunk in flight ahead; TERN_CUDA_ATTN_SPAN=0) and the span kernel
// (attention_span.cu, TERN_CUDA_ATTN_SPAN=1, AttentionArgs::span_kernel): the span's block-table lookups once and ahead
// of the PDL wait, copies with no dependent load, up to all 4 chunks of the span in flight
// (kv_stages), 256 threads, and fewer q heads per block when spans x KV heads are too few to
// fill the GPU. Both call the per-chunk steps of attention_chunk.cuh in the same order; its merge
// folds the same partials in the same order with the fold scales computed in parallel (a prefix
// max). Measured (bench/RESULTS.md): the span kernel is bound by the issue rate of those per-chunk
// steps, not by its copies. A third kernel, the two-chunk span kernel (attention_span_pair.cu,
// span_kernel = 2): the same float sequence with fewer instructions and half the barriers (two
// chunks per step, the segment tree's first level in registers), sharing the span kernel's merge;
// on the H200 it passed every attention and model test bit for bit and a 32k decode took 129.6
// instead of 155.9 us/layer. Its GQA-group form (span_kernel 3; with flags 16 + 32 + 64, i.e.
// 115, the default at head_dim 128 with an f16 cache, kernel 2 elsewhere) keeps the same floats
// again: probabilities stored in groups of the 4 queries that share
// a KV head (one 16-byte load per position), a values lane owning one or two dimensions of one
// chunk for all 4 queries (each V element loaded and converted once, the second chunk's chains
// handed over by shuffle and folded after the first's), and at head_dim 128 (f16) a compile-time
// score step whose segment tree runs as a transposing reduction (4 shuffles instead of 12 for 4
// queries, each addition pairing the same partial sums as the butterfly). Both two-chunk kernels
// wait for a step's K before the scores and its V only before the values. Flags in span_kernel
// (attention_span.cuh): 16 launches a span's KV heads next to each other, 32 makes blocks
// persistent (a block keeps its KV head and walks spans, its K/V ring running into the next
// span), 64 gives a values lane two dimensions. Measured (bench/RESULTS.md, 32k decode): 2: 132.5,
// 3 + 64: 94.0, 3 + 16 + 32 + 64: 83.0 us/layer; every form passed its bit-identity tests on the
// H200 (GroupSpanKernelEqualsPairKernelBitwise, PersistentSpanBlocksEqualOneBlockPerSpan).
//
// Split K/V ring (span_kernel + 128, kSpanSplitRing; kernel 3 + 64 at head_dim 128 with an f16
// cache, whole spans): the two-chunk kernels otherwise reissue a stage (K and V) after the values
// step, so with 3 stages a step's second chunk was issued at the step's start and waited on
// right away. With the ring a stage's K half is reissued for chunk gi + stages right after the
// scores step of chunk gi (the last read of that K) and its V half after the values step, each
// its own cp.async group (prologue in pairs: K 2p, K 2p + 1, V 2p, V 2p + 1), so the next step's
// second K is in flight during this step's softmax and values. Same bytes into the same stages
// before the same reads: same bits (GpuAttention.SplitKvRing*: kShapes, 32k-33k with persistent
// blocks, several sequences, graph replays, 2-4 stages). + 256 (kSpanValueQueryPairs, with the
// ring): a values lane serves 2 of a group's 4 queries, so a decode's values step runs on 8
// warps, not 4 (same chains). 243 = 115 + 128 was the default at head_dim 128 / f16 in session 5
// (now 1779, below; backend_settings.cpp default_span_kernel); TERN_CUDA_ATTN_SPLIT_RING=0/1/2/3/4
// (CudaBackendOptions::attention_split_ring) picks 115 / 243 / 499 / 755 / 1779 (A/B). Measured (H200, 8B
// shape, us/layer, bench/RESULTS.md): 32k 88.7 / 85.6 / 88.4, 8k 28.5 / 27.4 / 27.5; ncu at 32k:
// the kernel issues on 41% of cycles with 3.9 warps per scheduler and 0.66 eligible (9.5 cycles
// per warp instruction), DRAM 34%: bound by the per-warp latency of its phases, not by bytes in
// flight.
//
// Warp-specialized split ring (span_kernel + 512, kSpanWarpSpecialized; the default at head_dim 128
// / f16 in session 6, now in its lean form below: 755 = 243 + 512, TERN_CUDA_ATTN_SPLIT_RING=3; H200, 8B shape, attention
// alone: 32k 86.7 -> 75.9 us/layer, 8k 27.5 -> 25.8; Q4_K_M decode at 32k 192.4 -> 213.0 tok/s):
// attention_span_pair.cu attention_span_ws_kernel. The ring kernel's step is scores (8 warps),
// softmax and values (4 warps) with a block barrier between each, so a block's phases' latencies
// add up (ncu above). Here warps 0-3 (producers) score step s + 1 while warps 4-7 (consumers) run
// the softmax and values of step s: named barriers (bar.sync / bar.arrive with counts) hand over
// a double-buffered p (FULL / EMPTY per buffer); producers copy and wait for only the K halves of
// the ring, consumers only the V halves (3 stages, each role its own cp.async groups and its own
// 128-thread barrier). Same group_scores per key (16 keys per pass instead of 32), pair_softmax
// per query (one consumer lane folds a query's chunks in chunk order), group_values per (query,
// dimension, chunk) chain, the span partial stored with store_span_partial's records: the same
// floats in the same order per query, so kernel 2's bits (GpuAttention.SplitKvRing* run it: 755,
// 723 non-persistent, 1011 with the ignored + 256). Where it does not apply (stages other than 3,
// chunk split, folded merge, early_kv, caches not 16-byte aligned, the double-buffered p too big)
// the launcher drops the flag and runs the split ring kernel. ptxas (sm_90a): 123 registers, no
// spills, 7 barriers (the ring kernel it replaces: 128 registers, no spills).
//
// Lean warp-specialized ring (span_kernel + 1024, kSpanWsLean; the default at head_dim 128 / f16
// since session 7: 1779 = 755 + 1024, TERN_CUDA_ATTN_SPLIT_RING=4). ncu of 755 at a 32k decode:
// 66 us, 36.4 M warp instructions (FMAs 23%; the copies' address arithmetic ~19%: ~25
// instructions per 16-byte cp.async, signed divisions of the piece index; per-step divisions by
// the heads per token and reloads ~10%), issue slots 45% busy, DRAM 40%: bound by instructions
// and their latency, not bytes. The lean form runs the same steps with: one column of its role's
// rows per thread (a slot load, a wide multiply-add and the cp.async per 16 bytes, shared
// addresses as immediate offsets), per-query tables (position, first position, partial slot,
// head) filled before the PDL wait, one loop per role (a decode's q stays in the producers'
// registers for the whole walk: LeanScorer, with each chunk's keys in their own loop and the
// softcap branch outside it), q loaded ahead of the ring's prologue, the values step's fold
// scales loaded once per query (group_values_lean). Same bytes, same floats in the same order
// (GpuAttention.SplitKvRing*, LeanWarpSpecializedRingEqualsPairKernelBitwise). H200, 8B shape
// (bench/RESULTS.md, session 7): 26.2 M instructions, 54.8 us in ncu; attention alone 32k 74 ->
// 60 us/layer, 8k 25.4 -> 21.6; Q4_K_M decode at 32k 213 -> 236 tok/s, F16 139 -> 147.
//
// Sliced span merge (span_kernel + 16384, kSpanMergeSliced; session 9; with the lean ring 18163 =
// TERN_CUDA_ATTN_SPLIT_RING=5, the default at head_dim 128 / f16): the merge kernel with a block
// per (token, head, 32 dimensions) instead of per (token, head), so a 32k decode's 32 heads take
// 128 SMs instead of 32 and each block loads a quarter of the records' values
// (span_merge::merge_token_head_slice). A dimension's fold does not depend on the others and
// every block computes the same statistics and scales, so the same bits
// (GpuAttention.LeanRingSlicedMergeBitwise). H200 (bench/RESULTS.md, session 9): the merge alone
// 13.9 -> 11.4 us in ncu at 32k; 8B Q4_K_M at 32k 250.9 -> 254.9 tok/s. There too: what bounds
// the lean ring at 32k (ncu: 16 warps per SM, ~6.7 cycles per warp instruction on dependencies
// and hand-offs, DRAM latency not among them), and two things that did not help (an L2
// look-ahead of the ring's rows, slower; two keys per producer lane and a pipelined values loop,
// no change).
//
// Folded merge (span kernels, AttentionArgs::fold_merge; attention_span_merge.cuh): instead of the
// merge kernel, the last span block of each (tile, KV head, head slice) to finish (an atomic
// counter per (tile, blockIdx.y), left at zero for the next launch) merges the tile's tokens x
// heads with the merge kernel's fold sequence; a one-span tile merges its partial straight from
// shared memory. Same bits; it saves a launch per layer. By default the backend folds only plans
// whose tiles all have one span (contexts up to 256: measured faster on the H200); with several
// spans the counter, fences and reload behind the last block measured slower than the merge
// kernel, which keeps those. TERN_CUDA_ATTN_FOLD_MERGE=0 / 2 (CudaBackendOptions::
// attention_fold_merge) turns it off / on everywhere, TERN_CUDA_ATTN_FOLD_MAX_SPANS=n folds up
// to n spans per tile.
//
// Chunk split (two-chunk span kernels, AttentionArgs::chunk_split = cs, 1 or 2): a chunk's
// (m, l, a) above depends on its own positions only; what is ordered are the folds. So a block
// may take cs chunks of a span (4 / cs blocks per span: at ctx 1k the 8B shape has 4 spans x 8
// KV heads, 32 blocks' worth of work for 132 SMs, each walking its 4 chunks in turn) and store
// each chunk's m, l and a_d unfolded ([n_partials][4 chunks][n_heads][hd + 2], a token's records
// only for the chunks it reaches); the chunk merge kernel (attention_span.cu) folds a token's
// chunks into span partials in chunk order from (-inf, 0, 0), skipping empty chunks, and those
// into the result in span order, skipping empty spans: fold_stats / fold_acc, the expressions
// and order of the span blocks and their merge, so the same bits (tested against whole spans).
// No persistent blocks and no folded merge with it, and a whole GQA group (up to 4 q heads) per
// block: the parts already multiply the blocks. The backend picks it per plan with the default
// kernel (backend_settings.cpp default_chunk_split: past two chunks, up to 24 spans per tile,
// while spans x KV heads are fewer than the SMs, and where whole spans run the warp-specialized
// ring only below 8 spans per tile: since session 7 the 8B shape decodes whole spans from ~2k);
// TERN_CUDA_ATTN_CHUNK_SPLIT=0/1/2
// (CudaBackendOptions::attention_chunk_split) forces it off / on for any two-chunk kernel.
// Whole spans keep the GQA group (up to 4 q heads) per block as well once a tile has several
// spans (plan_attention_span; it spreads a group over blocks only for tiles of one span).
// TERN_CUDA_ATTN_SPAN_HPB=1/2/4 fixes the q heads per span block (A/B timing). Measured on the
// H200 (bench/RESULTS.md, 8B shape, us/layer): ctx 128 12.5 -> 9.2, 1k 23.5 -> 13.7, 2k 28.8 ->
// 19.5; whole-model 8B Q4_K_M at 1k 298 -> 322 tok/s, SmolLM2 at 128 / 1k +10% / +12%.
//
// Fused decode (two-chunk kernels with the chunk split, AttentionArgs::fused; attention_fused.cuh):
// in a step of one token per sequence the backend may take the layer's rope launch (rope of q and
// k plus the K/V write, the record right before the attention) into the attention launch
// (kAttnFusedRope). Blocks rotate their q as they load it (rope.cuh, the rope kernel's
// expressions); the block whose rows hold the token's position computes that K/V row into its
// ring (not copied: nobody wrote it yet) and, for head slice 0, writes it to the cache with the
// cache write's conversions. Same q, same K/V bytes: same bits, output and cache
// (tests/gpu/attention_fused_test.cpp). TERN_CUDA_ATTN_FUSED=0/3
// (CudaBackendOptions::attention_fused_decode): off / on (the default). Measured on the H200
// (bench/RESULTS.md, session 6, 8B shape, us/layer of rope + attention): 16.6 -> 14.9 at 1k, 12.8
// -> 10.3 at 128, 34.6 -> 32.0 at 4k. Merging in the launch too, by the last block of each (tile,
// KV head, head slice) through a counter (sessions 6 and 8, plain and lean), measured slower in
// every form (8B Q4_K_M 1k -11 to -12%: the merging blocks' tail) and was removed in session 10.
//
// Compact decode (AttentionArgs::span_kernel + kSpanCompact, attention_compact.cu; session 8, issue 7;
// TERN_CUDA_ATTN_COMPACT=0/1/2, CudaBackendOptions::attention_compact): in a step of one token per
// sequence whose attention takes the chunk split, with an f16 cache, head_dim 64 or 128 and GQA
// groups up to 4, a small kernel (no templates but head_dim, no ring, no fused rope) computes each
// (token, KV head, chunk) record in its own 128-thread block: V copied to shared memory with
// cp.async while the K rows load straight into registers, a score pass (chunk_scores' segments and
// butterfly), a warp per query for the softmax (chunk_softmax), a values pass (chunk_values'
// chains, unfolded). The records are the two-chunk kernels' chunk-split records, bit for bit, and
// the chunk merge kernel folds them as before. 1 keeps the rope launch; 2 takes it in as the fused
// decode does (attention_fused.cuh load_q, write_new_rows by the block whose chunk holds the
// token's position). Tests: GpuAttentionCompact.*, GpuAttentionFused.*. H200 (bench/RESULTS.md,
// session 8): rope + attention at 1k 13.2 -> 12.3 us/layer (8B), 10.0 -> 8.4 (SmolLM2); SmolLM2
// Q4_1 decode +10-12%. The default since session 8 is mode 3: 2 at head_dim <= 64, 1 above.
//
// Early K/V copies (two-chunk kernels, AttentionArgs::early_kv; opt-in, TERN_CUDA_ATTN_EARLY_KV=1
// or CudaBackendOptions::attention_early_kv, steps of at most 16 tokens): a block's first K/V
// chunks are issued before the PDL wait, overlapping the kernel before. Sound because at most
// one kernel runs ahead (each calls launch_dependents after its own wait) and what it may still
// write in the cache are the rows of this step's tokens: a row whose slot is one of the step's
// kv_slots is copied after the wait instead. Same bytes, same bits (tested); measured faster for
// the attention alone at ctx 128 and with the two-chunk split at 4k, but not faster (32k: slower)
// in whole-model decode, so off by default.
//
// Early K/V copies with the fused rope (AttentionArgs::early_kv 1 or 2 with kAttnFusedRope;
// TERN_CUDA_ATTN_FUSED_EARLY_KV=0/1/2, CudaBackendOptions::attention_fused_early_kv, default 2):
// the fused chunk-split blocks issue their first K/V stages before the PDL wait with nothing
// deferred (the kernel before is the q/k/v projection: the rope launch that wrote the step's rows
// is this launch, whose blocks compute those rows after the wait instead of copying them; every
// copied row was written by a completed launch), and with 2 also compute the rope's rotation
// factors (rope.cuh rope_factors: positions and the frequencies written at load) into their score
// buffer, unused until the first step's barrier. Same bytes, same floats (GpuAttentionFused.*).
// H200 (bench/RESULTS.md, session 7): 8B attention+rope at 1k 14.8 -> 13.5 (1) -> 13.0 (2)
// us/layer, SmolLM2 shape 11.1 -> 9.9; 8B Q4_K_M decode at 1k 380 -> 395 tok/s.
//
// Chunk kernel K/V copies: by default each 16-byte piece looks its row up in the block table (a
// dependent global load per cp.async); TERN_CUDA_ATTN_ROW_COPY=1 (AttentionArgs::row_copy) looks
// each row up once, all rows of a chunk in flight together, in this kernel and in
// attention_tc.h's. Same bytes, same bits (tested); measured only ~3% faster at a 32k decode
// (bench/RESULTS.md: the lookups were not what bounds it), so it stays off.
#pragma once

#include "backends/cuda/kernels.h"

namespace tern::cuda {

constexpr int kAttnMaxHeadsPerBlock = 4;

// Span kernel: picks heads per block (fewer while the grid would not cover every SM twice) and
// K/V stages (preferred_stages, fewer until the block fits max_smem_bytes), and sets
// a.span_kernel to `kernel`: 1 = one chunk per step (attention_span.cu), 2 = two chunks per step
// (attention_span_pair.cu, at least 2 stages; falls back to 1 when those do not fit). Same bits
// either way. a.chunk_split on entry asks for the chunk split (1 or 2 chunks per block); kept
// for the two-chunk kernels, else set to 0. Returns false, leaving `a` unchanged but for
// chunk_split = 0, when even one stage does not fit.
bool plan_attention_span(AttentionArgs& a, int n_sm, int max_smem_bytes, int preferred_stages, int kernel = 1);
// The span kernel and its merge (a.split and a.span_kernel set by plan_attention_span).
void launch_attention_span(const AttentionArgs& a, const LaunchEnv& env);
// Raises the span kernels' shared-memory limit (init_attention calls it).
void init_attention_span(int max_smem_bytes);
// Compact decode (attention_compact.cu): whether the compact per-chunk kernel can run the
// chunk-split plan `a` (plan_attention_span done; max_tile_tokens: the plan's largest tile), and
// its launch (launch_attention_span calls it, then the chunk merge kernel).
// a.span_kernel & kSpanCompact asks for it (a flag of the span kernel's choice: the op record
// has no room for another field).
constexpr int kSpanCompact = 2048;
bool attention_compact_applies(const AttentionArgs& a, int max_tile_tokens);
void launch_attention_compact(const AttentionArgs& a, const LaunchEnv& env);
// Launches of the warp-specialized span kernel (kSpanWarpSpecialized) in this process so far:
// tests check that it ran, not its fallback.
int64_t attention_span_ws_launches();
// Of those, launches of its lean form (kSpanWsLean).
int64_t attention_span_ws_lean_launches();
// Launches of the sliced span merge (kSpanMergeSliced) in this process so far.
int64_t attention_span_merge_sliced_launches();
// ... of those, with the prescaled fold (kSpanMergePrescaled).
int64_t attention_span_merge_prescaled_launches();

}  // namespace tern::cuda
