// Reference encoders for the k-quant super-blocks (q2_k .. q6_k) and q8_k.
//
// gguf-py has no k-quant encoder, so these are tern's own: a two-level round-to-nearest scheme
// with a small least-squares search per sub-block, the same shape of algorithm as ggml's
// reference quantizers (written here from the format description, not from ggml's code).
//
//  1. Fit each sub-block (16 or 32 elements) in float: either affine, x ≈ s*q - o with
//     q in [0, q_max], s >= 0, o >= 0 (q2_k, q4_k, q5_k), or symmetric, x ≈ s*q with
//     q in [-(q_max+1), q_max] (q3_k, q6_k). Candidates are round-to-nearest at ~20 inverse scales
//     around the naive one, each refined by least squares; the one with the smallest squared
//     error (after re-rounding) wins. Unweighted MSE: this is the oracle, not an importance-matrix
//     quantizer.
//  2. Quantize the sub-block scales (and offsets) against one fp16 super-block scale d (and dmin).
//  3. Re-round every element against the scale the decoder will actually see (d * sc, computed
//     as the same float product), so decode(encode(x)) is as close as the stored scales allow.
//
// Offsets are >= 0 (the block's minimum is clamped to <= 0), as the format's unsigned mins and
// ggml's quantizers assume; a block far from zero therefore spends range on [0, min].
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/quant_ref.h"
#include "core/quant_ref_layout.h"

namespace tern {
namespace {

using quant_layout::k_bit;
using quant_layout::k_crumb;
using quant_layout::k_nibble;
using quant_layout::put_bits;
using quant_layout::put_scale_min_k4;
using quant_layout::put_scale_q3k;
using quant_layout::q6k_nibble;

// Inverse-scale candidates: the naive one shifted by kSearchSteps * kSearchStep levels each way.
constexpr int kSearchSteps = 10;
constexpr float kSearchStep = 0.1f;

int round_clamped(float v, int lo, int hi) {
  const long r = std::lround(v);  // half away from zero
  return static_cast<int>(std::clamp<long>(r, lo, hi));
}

// ---- affine sub-blocks: x ≈ scale * q - offset ----

struct AffineFit {
  float scale = 0.0f;   // >= 0
  float offset = 0.0f;  // >= 0
};

// Squared error of decoding x with (scale, offset) after re-rounding each element to its best q.
float affine_error(const float* x, int n, int q_max, AffineFit f) {
  float err = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int q = f.scale > 0.0f ? round_clamped((x[i] + f.offset) / f.scale, 0, q_max) : 0;
    const float diff = f.scale * static_cast<float>(q) - f.offset - x[i];
    err += diff * diff;
  }
  return err;
}

// Least-squares (scale, offset) for fixed integer quants q; false if the system is degenerate.
bool affine_least_squares(const float* x, const int* q, int n, AffineFit* out) {
  double sum_q = 0, sum_qq = 0, sum_x = 0, sum_qx = 0;
  for (int i = 0; i < n; ++i) {
    sum_q += q[i];
    sum_qq += static_cast<double>(q[i]) * q[i];
    sum_x += x[i];
    sum_qx += q[i] * static_cast<double>(x[i]);
  }
  const double det = n * sum_qq - sum_q * sum_q;
  if (det <= 0) return false;  // all q equal
  double scale = (n * sum_qx - sum_q * sum_x) / det;
  double low = (sum_qq * sum_x - sum_q * sum_qx) / det;  // = -offset
  if (low > 0) {  // offsets must be >= 0: pin the low end at zero and refit the scale alone
    low = 0;
    scale = sum_qx / sum_qq;
  }
  if (!(scale > 0)) return false;
  out->scale = static_cast<float>(scale);
  out->offset = static_cast<float>(-low);
  return true;
}

AffineFit fit_affine(const float* x, int n, int q_max) {
  float low = 0.0f, high = x[0];
  for (int i = 0; i < n; ++i) {
    low = std::min(low, x[i]);
    high = std::max(high, x[i]);
  }
  if (high <= low) return {0.0f, -low};  // constant block at or below zero: offset alone is exact
  AffineFit best{(high - low) / static_cast<float>(q_max), -low};
  float best_err = affine_error(x, n, q_max, best);
  int q[kQK_K];
  for (int step = -kSearchSteps; step <= kSearchSteps; ++step) {
    const float inv_scale = (static_cast<float>(q_max) + kSearchStep * static_cast<float>(step)) / (high - low);
    for (int i = 0; i < n; ++i) q[i] = round_clamped((x[i] - low) * inv_scale, 0, q_max);
    AffineFit candidate;
    if (!affine_least_squares(x, q, n, &candidate)) continue;
    const float err = affine_error(x, n, q_max, candidate);
    if (err < best_err) {
      best_err = err;
      best = candidate;
    }
  }
  return best;
}

// ---- symmetric sub-blocks: x ≈ scale * q, q in [-(q_max + 1), q_max] ----

float symmetric_error(const float* x, int n, int q_max, float scale) {
  float err = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int q = scale != 0.0f ? round_clamped(x[i] / scale, -q_max - 1, q_max) : 0;
    const float diff = scale * static_cast<float>(q) - x[i];
    err += diff * diff;
  }
  return err;
}

// Returns the signed scale; the extreme element maps to -(q_max + 1) or +q_max, whichever errs less.
float fit_symmetric(const float* x, int n, int q_max) {
  float amax = 0.0f, extreme = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      extreme = x[i];
    }
  }
  if (amax == 0.0f) return 0.0f;
  float best = extreme / static_cast<float>(-q_max - 1);
  float best_err = symmetric_error(x, n, q_max, best);
  for (const int target : {-q_max - 1, q_max}) {
    for (int step = -kSearchSteps; step <= kSearchSteps; ++step) {
      const float inv_scale = (static_cast<float>(target) + kSearchStep * static_cast<float>(step)) / extreme;
      double sum_qx = 0, sum_qq = 0;
      for (int i = 0; i < n; ++i) {
        const int q = round_clamped(x[i] * inv_scale, -q_max - 1, q_max);
        sum_qx += q * static_cast<double>(x[i]);
        sum_qq += static_cast<double>(q) * q;
      }
      if (sum_qq == 0) continue;
      const float scale = static_cast<float>(sum_qx / sum_qq);
      const float err = symmetric_error(x, n, q_max, scale);
      if (err < best_err) {
        best_err = err;
        best = scale;
      }
    }
  }
  return best;
}

// ---- super-block stage ----

// An fp16 super-scale d with round(v / d) in [0, levels] (or [-levels-1, levels] when symmetric)
// for every v; returns d's fp16 bits and sets *d_f32 to the value the decoder will see.
uint16_t super_scale(float v_extreme, float levels, float* d_f32) {
  const uint16_t bits = f32_to_fp16(v_extreme / levels);
  *d_f32 = fp16_to_f32(bits);
  return bits;
}

int quantize_sub_scale(float v, float d, int lo, int hi) { return d != 0.0f ? round_clamped(v / d, lo, hi) : 0; }

// Affine super-block with kSubBlocks sub-blocks; sub-scales and offsets get scale_levels + 1
// levels. Writes d, dmin, the per-sub-block integer scales/mins and the element quants q.
struct AffineSuperBlock {
  uint16_t d, dmin;
  int sc[16], m[16];
  int q[kQK_K];
};

AffineSuperBlock quantize_affine_superblock(const float* x, int sub_elems, int q_max, int scale_levels) {
  const int n_sub = kQK_K / sub_elems;
  AffineFit fits[16];
  float max_scale = 0.0f, max_offset = 0.0f;
  for (int j = 0; j < n_sub; ++j) {
    fits[j] = fit_affine(x + j * sub_elems, sub_elems, q_max);
    max_scale = std::max(max_scale, fits[j].scale);
    max_offset = std::max(max_offset, fits[j].offset);
  }
  AffineSuperBlock out;
  float d, dmin;
  out.d = super_scale(max_scale, static_cast<float>(scale_levels), &d);
  out.dmin = super_scale(max_offset, static_cast<float>(scale_levels), &dmin);
  for (int j = 0; j < n_sub; ++j) {
    out.sc[j] = quantize_sub_scale(fits[j].scale, d, 0, scale_levels);
    out.m[j] = quantize_sub_scale(fits[j].offset, dmin, 0, scale_levels);
    const float scale = d * static_cast<float>(out.sc[j]);  // exactly the decoder's products
    const float offset = dmin * static_cast<float>(out.m[j]);
    for (int i = j * sub_elems; i < (j + 1) * sub_elems; ++i) {
      out.q[i] = scale > 0.0f ? round_clamped((x[i] + offset) / scale, 0, q_max) : 0;
    }
  }
  return out;
}

// Symmetric super-block of 16 sub-blocks of 16; sub-scales are signed in [-(scale_levels+1),
// scale_levels]. The largest-magnitude sub-scale maps to -(scale_levels + 1), using the extra
// negative level.
struct SymmetricSuperBlock {
  uint16_t d;
  int sc[16];
  int q[kQK_K];
};

SymmetricSuperBlock quantize_symmetric_superblock(const float* x, int q_max, int scale_levels) {
  float scales[16];
  float amax = 0.0f, extreme = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric(x + 16 * j, 16, q_max);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      extreme = scales[j];
    }
  }
  SymmetricSuperBlock out;
  float d;
  out.d = super_scale(extreme, static_cast<float>(-scale_levels - 1), &d);
  for (int j = 0; j < 16; ++j) {
    out.sc[j] = quantize_sub_scale(scales[j], d, -scale_levels - 1, scale_levels);
    const float scale = d * static_cast<float>(out.sc[j]);
    for (int i = 16 * j; i < 16 * (j + 1); ++i) {
      out.q[i] = scale != 0.0f ? round_clamped(x[i] / scale, -q_max - 1, q_max) : 0;
    }
  }
  return out;
}

}  // namespace

void quantize_block_ref(const float* x, BlockQ2_K* b) {
  const AffineSuperBlock s = quantize_affine_superblock(x, 16, /*q_max=*/3, /*scale_levels=*/15);
  std::memset(b, 0, sizeof *b);
  b->d = s.d;
  b->dmin = s.dmin;
  for (int j = 0; j < 16; ++j) b->scales[j] = static_cast<uint8_t>(s.sc[j] | (s.m[j] << 4));
  for (int e = 0; e < kQK_K; ++e) put_bits(b->qs, k_crumb(e), 2, s.q[e]);
}

// The stored 3rd bit is inverted: set means q >= 0 (q = low2), clear means q = low2 - 4.
void quantize_block_ref(const float* x, BlockQ3_K* b) {
  const SymmetricSuperBlock s = quantize_symmetric_superblock(x, /*q_max=*/3, /*scale_levels=*/31);
  std::memset(b, 0, sizeof *b);
  b->d = s.d;
  for (int j = 0; j < 16; ++j) put_scale_q3k(b->scales, j, s.sc[j]);
  for (int e = 0; e < kQK_K; ++e) {
    const int biased = s.q[e] + 4;  // [0, 7]
    put_bits(b->qs, k_crumb(e), 2, biased & 3);
    put_bits(b->hmask, k_bit(e), 1, biased >> 2);
  }
}

void quantize_block_ref(const float* x, BlockQ4_K* b) {
  const AffineSuperBlock s = quantize_affine_superblock(x, 32, /*q_max=*/15, /*scale_levels=*/63);
  std::memset(b, 0, sizeof *b);
  b->d = s.d;
  b->dmin = s.dmin;
  for (int j = 0; j < 8; ++j) put_scale_min_k4(b->scales, j, s.sc[j], s.m[j]);
  for (int e = 0; e < kQK_K; ++e) put_bits(b->qs, k_nibble(e), 4, s.q[e]);
}

void quantize_block_ref(const float* x, BlockQ5_K* b) {
  const AffineSuperBlock s = quantize_affine_superblock(x, 32, /*q_max=*/31, /*scale_levels=*/63);
  std::memset(b, 0, sizeof *b);
  b->d = s.d;
  b->dmin = s.dmin;
  for (int j = 0; j < 8; ++j) put_scale_min_k4(b->scales, j, s.sc[j], s.m[j]);
  for (int e = 0; e < kQK_K; ++e) {
    put_bits(b->qs, k_nibble(e), 4, s.q[e] & 0x0f);
    put_bits(b->qh, k_bit(e), 1, s.q[e] >> 4);
  }
}

void quantize_block_ref(const float* x, BlockQ6_K* b) {
  const SymmetricSuperBlock s = quantize_symmetric_superblock(x, /*q_max=*/31, /*scale_levels=*/127);
  std::memset(b, 0, sizeof *b);
  b->d = s.d;
  for (int j = 0; j < 16; ++j) b->scales[j] = static_cast<int8_t>(s.sc[j]);
  for (int e = 0; e < kQK_K; ++e) {
    const int biased = s.q[e] + 32;  // [0, 63]
    put_bits(b->ql, q6k_nibble(e), 4, biased & 0x0f);
    put_bits(b->qh, k_crumb(e), 2, biased >> 4);
  }
}

// Activation format for k-quant dot products: float32 d, q in [-127, 127] (never -128, so
// kernels may negate q freely), bsums[k] = sum of q over elements 16k .. 16k + 15.
void quantize_block_ref(const float* x, BlockQ8_K* b) {
  float amax = 0.0f;
  for (int e = 0; e < kQK_K; ++e) amax = std::max(amax, std::fabs(x[e]));
  std::memset(b, 0, sizeof *b);
  if (amax == 0.0f) return;  // d = 0, all quants 0
  const float inv_scale = 127.0f / amax;
  b->d = amax / 127.0f;
  for (int e = 0; e < kQK_K; ++e) b->qs[e] = static_cast<int8_t>(round_clamped(x[e] * inv_scale, -127, 127));
  for (int k = 0; k < kQK_K / 16; ++k) {
    int sum = 0;
    for (int e = 16 * k; e < 16 * (k + 1); ++e) sum += b->qs[e];
    b->bsums[k] = static_cast<int16_t>(sum);
  }
}

}  // namespace tern
